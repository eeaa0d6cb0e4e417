"""eventhub-balancer: central partition balancing for Azure Event Hubs consumers on Kubernetes.

Layers, from pure to I/O (checked by the import-linter contract in `.importlinter`):
`balancing` (the pure planner) <- `adapters` (Kubernetes, Event Hubs, Blob Storage) <-
`handlers` (kopf) and `consumer` (the pod runtime) <- `local` (the local stack) <- `cli`.
"""

import platform

__version__ = "0.1.0"


def build_labels() -> dict[str, str]:
    """The labels of the operator's and the consumer's ``build_info`` metric: which release
    runs, on which Python (a fleet mid-upgrade shows both)."""
    return {"version": __version__, "python": platform.python_version()}
