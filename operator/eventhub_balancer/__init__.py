"""eventhub-balancer: central partition balancing for Azure Event Hubs consumers on Kubernetes.

Layers, from pure to I/O (checked by the import-linter contract in `.importlinter`):
`balancing` (the pure planner) <- `adapters` (Kubernetes, Event Hubs, Blob Storage) <-
`handlers` (kopf) and `consumer` (the pod runtime) <- `local` (the local stack) <- `cli`.
"""

__version__ = "0.1.0"
