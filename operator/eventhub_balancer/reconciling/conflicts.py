"""Two EventHubConsumers that would fight: the later one is refused, never fought. Pure.

Two consumers of one namespace overlap when they select the same pod (both selectors match
it: each would rewrite the other's pod annotations and hand the pod partitions at its own
epochs), or when they read the same hub and consumer group into the same checkpoint location
(their epochs are counted apart, so each would fence the other out in turn). The later one, by
creationTimestamp and then name, gets the condition ``Conflict`` naming the earlier one and
writes nothing else: no epochs, no ConfigMaps, no pod annotations. The earlier one never looks
at the later one, so it works as if alone; once the overlap is gone, the later one's next cycle
works normally (`deciding` words the refusal).

Across namespaces age decides nothing: a location's account, container, hub and group are not
secret, so "the older one wins" would let a tenant who creates a CR first (or squats while the
victim recreates its own) stop another namespace's consumer. A location belongs to a namespace
only by the install's word: an admin binds a host (a checkpoint account's or an Event Hubs
namespace's) to one namespace (``ehb operator --bind-location NS=HOST``, chart value
``locationBindings``), and a consumer in any other namespace that names that host is refused
(`bound`), whatever its age, while the consumers of the bound namespace never look at the
others. A location nobody bound that consumers of two namespaces name is refused to *both*
(`shared`, reason ``LocationShared``), each naming the other: the operator cannot tell whose it
is (the blobs name pods, not namespaces), and letting both work would have their epochs fence
each other out wherever both may write the container. A binding, or another container or
consumer group on either side, ends it.

A refused consumer writes nothing, so a consumer that was working when the overlap appeared
keeps what it handed out: its pods go on with the partitions and epochs their ConfigMaps hold,
nothing moves and no epoch is given out, so no partition gets a second owner; a pod that
leaves meanwhile keeps its partitions in the record until the overlap ends, and the first
cycle after it hands them on at new epochs, from the record (docs/failures.md).

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
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions, labelselectors, specs

#: The condition type, True on the later of two overlapping consumers.
CONFLICT = "Conflict"
#: Its reason when True (and the Ready condition's), and when the overlap is gone.
REASON = "Conflict"
REASON_CLEARED = "NoConflict"
#: Conflict's reason when the location is bound to another namespace by the install.
REASON_BOUND = "LocationBound"
#: Conflict's reason when another namespace names this location and nobody bound it.
REASON_SHARED = "LocationShared"
#: How many of the consumers sharing a location a message names (the rest are counted).
NAMED = 4

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


def hosts(location: tuple[str, ...]) -> tuple[str, ...]:
    """The hosts a location names: the Event Hubs namespace and the checkpoint account's host
    (none for a connection string's Secret, which belongs to its namespace already)."""
    found = [location[0]] if location and location[0] else []
    account = location[3] if len(location) > 3 else ""
    if account and not account.startswith("secret:"):
        host = urllib.parse.urlsplit(account if "//" in account else f"//{account}").hostname
        if host:
            found.append(host)
    return tuple(found)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bindings:
    """The hosts an admin bound to one namespace each (``--bind-location NS=HOST``): only a
    consumer in that namespace may name the host as its Event Hubs namespace or checkpoint
    account. Empty: nothing is bound."""

    #: (host in lower case, the namespace it belongs to), one pair per host
    hosts: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, hosts: Mapping[str, str]) -> Bindings:
        return cls(hosts=tuple(sorted((h.lower().rstrip("."), ns) for h, ns in hosts.items())))

    def owners(self, location: tuple[str, ...] | None) -> dict[str, str]:
        """{host: namespace} of the hosts of ``location`` that are bound."""
        if location is None or not self.hosts:
            return {}
        bound = dict(self.hosts)
        return {h: bound[h] for h in hosts(location) if h in bound}


#: No binding: the default of an install that lists none.
UNBOUND = Bindings()


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
    """Why this consumer writes nothing: the earlier consumer of its namespace it yields to,
    or the consumers of other namespaces that name its unbound location (``others``), or the
    namespace binding that keeps its location from it (``others`` empty)."""

    others: tuple[Peer, ...]
    why: str
    reason: str = REASON
    #: the hosts of a shared location, either of which an admin may bind
    hosts: tuple[str, ...] = ()


def bound(me: Peer, bindings: Bindings) -> Overlap | None:
    """The refusal of ``me`` when a host of its location is bound to another namespace."""
    foreign = sorted(h for h, ns in bindings.owners(me.location).items() if ns != me.namespace)
    if not foreign:
        return None
    return Overlap(
        others=(),
        why=(
            f"the host {', '.join(foreign)} is bound to another namespace by the install "
            "(ehb operator --bind-location, chart value locationBindings): this one writes "
            "nothing; name a hub and checkpoint account of this namespace's own, or ask an "
            "admin to bind the host to this namespace"
        ),
        reason=REASON_BOUND,
    )


def find(
    me: Peer,
    peers: Iterable[Peer],
    *,
    pod_labels: Sequence[Mapping[str, str]],
    bindings: Bindings = UNBOUND,
) -> Overlap | None:
    """Why ``me`` may not work: its location is bound to another namespace (`bound`), or
    consumers of other namespaces name it and nobody bound it (`shared`: whatever their age),
    or the earliest consumer of its namespace before it overlaps it; None: ``me`` may work.

    ``pod_labels``: the labels of the pods ``me`` selects.
    """
    refused = bound(me, bindings)
    if refused is not None:
        return refused
    across = shared(me, peers, bindings=bindings)
    if across:
        return Overlap(
            others=tuple(across),
            why="names the same Event Hub, consumer group and checkpoint location",
            reason=REASON_SHARED,
            hosts=hosts(me.location) if me.location is not None else (),
        )
    found: Peer | None = None
    why = ""
    for other in peers:
        if other.deleting or other.namespace != me.namespace or other.name == me.name:
            continue
        if other.order >= me.order or (found is not None and other.order >= found.order):
            continue
        if other.location is not None and other.location == me.location:
            found = other
            why = "reads the same Event Hub and consumer group into the same checkpoint location"
            continue
        if other.selector is None:
            continue
        if any(other.selector.matches(labels) for labels in pod_labels):
            found, why = other, "selects the same pods"
    return Overlap(others=(found,), why=why) if found is not None else None


def shared(me: Peer, peers: Iterable[Peer], *, bindings: Bindings = UNBOUND) -> list[Peer]:
    """The consumers of other namespaces that name ``me``'s location while no binding says
    whose it is (a bound location refuses them instead, and never ``me`` when its namespace
    holds the binding): in the order they were created."""
    if me.location is None or bindings.owners(me.location):
        return []
    return sorted(
        (
            other
            for other in peers
            if not other.deleting
            and other.namespace != me.namespace
            and other.location == me.location
        ),
        key=lambda p: p.order,
    )


def condition(overlap: Overlap) -> conditions.Condition:
    if not overlap.others:
        message = f"this checkpoint location: {overlap.why}"
    elif overlap.reason == REASON_SHARED:
        named = ", ".join(o.title for o in overlap.others[:NAMED])
        more = overlap.others[NAMED:]
        some = f"{named} and {len(more)} more" if more else named
        host = " or NS=".join(overlap.hosts) or "HOST"
        message = (
            f"{some} in another namespace {overlap.why}, and no binding says whose it is: "
            "both write nothing until one of them names another checkpoint container or "
            "consumer group (or is deleted), or an admin binds the location to the namespace "
            f"it belongs to (ehb operator --bind-location NS={host}, chart value "
            "locationBindings)"
        )
    else:
        message = (
            f"{overlap.others[0].title} {overlap.why} and is older: this one writes nothing "
            "until the overlap is gone (change its selector or checkpoint location, or "
            "delete one of them)"
        )
    return conditions.Condition(
        type=CONFLICT, status="True", reason=overlap.reason, message=message
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
