"""The operator/pod contracts: the CR spec and its start positions, the per-pod ConfigMaps,
conditions, pod states, and the checkpoint blobs shared with the SDK and KEDA."""
