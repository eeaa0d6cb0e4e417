"""What the parts of the cache share (`Seen`): the rosters, the indexes they start from, the
kinds kopf has listed again, and the peers' summaries; and what the watch's names mean here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from eventhub_balancer.contracts import configmaps, labelselectors, specs
from eventhub_balancer.handlers.cache import shelves
from eventhub_balancer.handlers.cache.rosters import Rosters
from eventhub_balancer.reconciling import conflicts

Body = Mapping[str, Any]
Key = tuple[str, str]  # (namespace, consumer)
#: A kopf index as the daemons receive it: key -> the bodies (or summaries) filed under it.
Index = Mapping[Any, Iterable[Any]]

#: The watch's kind names as the rosters name them.
WATCHED = {
    shelves.CONSUMERS: shelves.CONSUMER,
    shelves.PODS: shelves.PODS,
    shelves.CONFIGMAPS: shelves.CONFIGMAPS,
}


def labelled(consumer: str) -> Callable[[Body], bool]:
    """Whether a ConfigMap is managed by the operator and carries ``consumer``'s label (what
    its watch and its listing select)."""
    label = configmaps.label_value(consumer)

    def carries(body: Body) -> bool:
        labels = shelves.meta(body).get("labels") or {}
        return bool(
            labels.get(configmaps.LABEL_CONSUMER) == label
            and labels.get(configmaps.LABEL_MANAGED_BY) == configmaps.MANAGED_BY
        )

    return carries


def selects(selector: specs.Selector | None) -> Callable[[Body], bool]:
    """Whether the selector matches a pod (no selector, an invalid spec: none)."""

    def matches(body: Body) -> bool:
        return selector is not None and selector.matches(shelves.meta(body).get("labels") or {})

    return matches


@dataclasses.dataclass(eq=False)
class Seen:
    """What the three parts share: the rosters, the indexes they start from, the kinds kopf
    has listed again, and the peers' summaries."""

    #: the rosters, and which of them each object may concern
    rosters: Rosters = dataclasses.field(default_factory=Rosters)
    #: kopf's indexes, handed over by each daemon at start (`tracking.Following.attach`)
    indexes: dict[str, Index] = dataclasses.field(default_factory=dict)
    #: the kinds kopf has listed again since the start: their indexes may still hold
    #: objects that vanished meanwhile, so a new roster lists those kinds once
    relisted: set[str] = dataclasses.field(default_factory=set)
    #: every EventHubConsumer summed up, as of the last CR event (`serving.CachedKube.peers`); None:
    #: build it again from the index at the next ask
    peers: tuple[conflicts.Peer, ...] | None = None
    #: the uids of peers kopf's index still holds that the API server said were gone
    #: (`relisting.Ghosts`): left out of the peers
    gone: set[str] = dataclasses.field(default_factory=set)
    #: the pods the operator watches at all (``ehb operator --pod-selector``); None: every
    #: pod. A consumer's roster keeps, and its reads list, what its selector selects among
    #: them: a pod outside never reaches the watch, so a listing must not bring it in either.
    pod_scope: labelselectors.Selector | None = None
