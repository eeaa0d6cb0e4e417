"""The keys kopf's indexes file bodies under (`kopfwiring`), where a roster starts (`following`).

A new roster looks up one key per kind: its CR by name, its pods by one of its selector's
labels (or the namespace), its ConfigMaps by its label. From then on the watch handlers keep
the roster, and the indexes are not read again until a selector changes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from eventhub_balancer.contracts import configmaps, specs

#: The kinds the watch delivers, as the event handlers name them.
CONSUMERS, PODS, CONFIGMAPS = "consumers", "pods", "configmaps"
#: The index of every EventHubConsumer summed up for the conflict check (`conflicts.Peer`):
#: a cycle compares summaries, it parses no other consumer's spec.
PEERS = "peers"


def consumer_key(namespace: str, name: str) -> tuple[str, str]:
    return (namespace, name)


def peer_key(namespace: str) -> str:
    """Summaries are filed by namespace; the conflict check reads them all (a checkpoint
    location is shared across namespaces)."""
    return namespace


def pod_keys(namespace: str, labels: Mapping[str, str]) -> list[Hashable]:
    """A pod is filed under its namespace and under each of its labels: a selector with
    matchLabels looks up one label, not the whole namespace."""
    return [(namespace,), *((namespace, k, v) for k, v in labels.items())]


def pod_lookup(namespace: str, selector: specs.Selector) -> Hashable:
    """The key under which every pod ``selector`` may match is filed (a superset)."""
    labels = sorted(selector.match_labels.items())
    return (namespace, *labels[0]) if labels else (namespace,)


def configmap_key(namespace: str, labels: Mapping[str, str]) -> tuple[str, str] | None:
    """A ConfigMap is filed under its consumer's label, when it has one."""
    consumer = labels.get(configmaps.LABEL_CONSUMER)
    return (namespace, consumer) if consumer else None
