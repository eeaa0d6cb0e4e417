"""The operator/pod contracts: the CR spec, the per-pod ConfigMaps, conditions, pod states."""
