"""The contracts between the operator and the pods: the CR spec, the per-pod ConfigMaps, conditions."""
