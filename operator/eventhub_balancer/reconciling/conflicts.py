"""Two EventHubConsumers that would fight: the later one is refused, never fought. Pure.

Two consumers overlap when they select the same pod (same namespace, both selectors match
it: each would rewrite the other's pod annotations and hand the pod partitions at its own
epochs), or when they read the same hub and consumer group into the same checkpoint location
(their epochs are counted apart, so each would fence the other out in turn). The later one, by
creationTimestamp and then namespace/name, gets the condition ``Conflict`` naming the earlier
one and writes nothing else: no epochs, no ConfigMaps, no pod annotations. The earlier one
never looks at the later one, so it works as if alone; once the overlap is gone, the later
one's next cycle works normally (`deciding` words the refusal).

Every consumer is summed up once per watch event (`peer`, through a kopf index), so a cycle
compares summaries: a tuple comparison per consumer, and a selector match per pod only for the
earlier consumers of the same namespace.

Limits: a checkpoint location named by a connection string is known only by the Secret's
reference (two Secrets holding the same account are not seen as one); a consumer whose spec is
invalid claims nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions, labelselectors, specs

#: The condition type, True on the later of two overlapping consumers.
CONFLICT = "Conflict"
#: Its reason when True (and the Ready condition's), and when the overlap is gone.
REASON = "Conflict"
REASON_CLEARED = "NoConflict"

#: Sorts after any real creationTimestamp: a body without one is the later.
_NEVER = datetime.datetime.max.replace(tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Peer:
    """What overlaps are judged on, of one EventHubConsumer."""

    namespace: str
    name: str
    uid: str = ""
    created: datetime.datetime = _NEVER
    #: None: the spec is invalid (it claims nothing)
    selector: labelselectors.Selector | None = None
    location: tuple[str, ...] | None = None
    #: being deleted: it gives up what it claimed
    deleting: bool = False

    @property
    def order(self) -> tuple[datetime.datetime, str, str]:
        return (self.created, self.namespace, self.name)

    @property
    def title(self) -> str:
        return f"EventHubConsumer {self.namespace}/{self.name}"


def location(spec: specs.ConsumerSpec, *, namespace: str) -> tuple[str, ...]:
    """The checkpoint location: the blob path's parts (lower-cased, as the blob names are) and
    the account, by URL, or by the Secret (in its namespace) that holds its connection
    string."""
    creds = spec.checkpoint_credentials
    if creds.secret_ref is not None:
        account = f"secret:{namespace}/{creds.secret_ref.name}/{creds.secret_ref.key}"
    else:
        account = spec.checkpoint_account_url.lower().rstrip("/")
    return (
        spec.fully_qualified_namespace.lower(),
        spec.event_hub_name.lower(),
        spec.consumer_group.lower(),
        account,
        spec.checkpoint_container,
    )


def peer(
    body: Mapping[str, Any],
    *,
    spec: specs.ConsumerSpec | None = None,
    namespace: str | None = None,
    name: str | None = None,
) -> Peer:
    """The summary of an EventHubConsumer's body; ``spec`` when it is parsed already, the
    namespace and name when known better than the body says (a daemon knows its own)."""
    meta: Mapping[str, Any] = body.get("metadata") or {}
    namespace = namespace or str(meta.get("namespace") or "")
    if spec is None:
        try:
            spec = specs.parse_spec(body.get("spec") or {})
        except errors.InvalidInput:
            spec = None
    return Peer(
        namespace=namespace,
        name=name or str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        created=specs.parse_time(meta.get("creationTimestamp")) or _NEVER,
        selector=spec.selector if spec is not None else None,
        location=location(spec, namespace=namespace) if spec is not None else None,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def pod_labels(
    bodies: Iterable[Mapping[str, Any]], *, selector: labelselectors.Selector
) -> list[Mapping[str, str]]:
    """The labels of the pods ``selector`` matches (a list call may be looser)."""
    found: list[Mapping[str, str]] = []
    for body in bodies:
        labels: Mapping[str, str] = (body.get("metadata") or {}).get("labels") or {}
        if selector.matches(labels):
            found.append(labels)
    return found


@dataclasses.dataclass(frozen=True, kw_only=True)
class Overlap:
    """The earlier consumer this one yields to, and why."""

    other: Peer
    why: str


def find(
    me: Peer, peers: Iterable[Peer], *, pod_labels: Sequence[Mapping[str, str]]
) -> Overlap | None:
    """The earliest consumer before ``me`` that overlaps it; None: ``me`` may work.

    ``pod_labels``: the labels of the pods ``me`` selects.
    """
    found: Overlap | None = None
    for other in peers:
        if other.deleting or (other.namespace, other.name) == (me.namespace, me.name):
            continue
        if other.order >= me.order or (found is not None and other.order >= found.other.order):
            continue
        if other.location is not None and other.location == me.location:
            found = Overlap(
                other=other,
                why="reads the same Event Hub and consumer group into the same checkpoint location",
            )
            continue
        if other.namespace != me.namespace or other.selector is None:
            continue
        shared = next((labels for labels in pod_labels if other.selector.matches(labels)), None)
        if shared is not None:
            found = Overlap(other=other, why="selects the same pods")
    return found


def condition(overlap: Overlap) -> conditions.Condition:
    return conditions.Condition(
        type=CONFLICT,
        status="True",
        reason=REASON,
        message=(
            f"{overlap.other.title} {overlap.why} and is older: this one writes nothing "
            "until the overlap is gone (change its selector or checkpoint location, or "
            "delete one of them)"
        ),
    )


def cleared(previous: specs.StatusBody) -> list[conditions.Condition]:
    """Conflict False once the overlap is gone (nothing while there never was one)."""
    old = conditions.find(previous.get("conditions"), CONFLICT)
    if old is None or old.get("status") == "False":
        return []
    return [
        conditions.Condition(
            type=CONFLICT,
            status="False",
            reason=REASON_CLEARED,
            message="no other EventHubConsumer selects these pods or this checkpoint location",
        )
    ]
