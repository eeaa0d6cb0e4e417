"""The keys kopf's indexes file bodies under (`registering`), and that `caching` looks up.

A listing looks up one key (a consumer's ConfigMaps by its label, a selector's pods by one of
its labels, or a namespace); a read by name (`caching.CachedKube.pods_by_name`) looks up a
`ByName`, which every pod and ConfigMap is also filed under.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping

from eventhub_balancer.contracts import configmaps

#: The kinds the cache serves, as `observed` names them.
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


@dataclasses.dataclass(frozen=True)
class ByName:
    """The key every pod and ConfigMap is also filed under, to be read by name (`changed`):
    of a type of its own, so that it is never one of the tuples a listing looks up."""

    namespace: str
    name: str


def pod_keys(namespace: str, labels: Mapping[str, str], name: str) -> list[Hashable]:
    """A pod is filed under its namespace and under each of its labels: a selector with
    matchLabels looks up one label, not the whole namespace; and under its name."""
    return [(namespace,), *((namespace, k, v) for k, v in labels.items()), ByName(namespace, name)]


def configmap_key(namespace: str, labels: Mapping[str, str]) -> tuple[str, str] | None:
    consumer = labels.get(configmaps.LABEL_CONSUMER)
    return (namespace, consumer) if consumer else None


def configmap_keys(namespace: str, labels: Mapping[str, str], name: str) -> list[Hashable]:
    """A ConfigMap is filed under its consumer's label (when it has one) and its name."""
    key = configmap_key(namespace, labels)
    return [*([key] if key is not None else []), ByName(namespace, name)]
