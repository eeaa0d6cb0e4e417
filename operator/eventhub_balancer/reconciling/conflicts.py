"""Two EventHubConsumers that would fight: the newcomer is refused, never fought. Pure.

Two consumers of one namespace overlap when they select the same pod (both selectors match
it: each would rewrite the other's pod annotations and hand the pod partitions at its own
epochs), or when they read the same hub and consumer group into the same checkpoint location
(their epochs are counted apart, so each would fence the other out in turn).

A location belongs to whoever holds it: of the consumers that name it, the oldest (by
creationTimestamp, then uid) keeps working as if alone, and only a newcomer is refused, with
the condition ``Conflict`` naming the holder and writing nothing else: no epochs, no
ConfigMaps, no pod annotations. The same holds across namespaces (reason ``LocationShared``):
a consumer that works is never stopped by a CR someone creates later, in any namespace, so a
tenant who names another's location stops nobody but itself. Once the overlap is gone, the
newcomer's next cycle works normally (`deciding` words the refusal).

Across namespaces a newcomer is not only a CR created later: a tenant rarely lacks a CR older
than its victim's, and editing it to name the victim's location made it the holder at once,
stopping a consumer that worked. So the title there is first what the status, which only the
operator writes, says of each consumer (`standing`): one decided at its current generation and
not refused holds against one whose spec changed since its last decision (a location is named
in the spec, so naming another one always changes the generation) or that is refused; only
among equals does age decide (`Peer.title`).

Age is a weak title across namespaces, since a location's account, container, hub and group
are not secret: a tenant who creates a CR first (or while the victim recreates its own) holds
the location. So the install's word decides over age: an admin binds a host (a checkpoint
account's or an Event Hubs namespace's) to one namespace (``ehb operator --bind-location
NS=HOST``, chart value ``locationBindings``); a consumer in any other namespace that names that
host is refused (`bound`, reason ``LocationBound``) whatever its age, while the consumers of the
bound namespace never look at the others. The refusal of a newcomer names that binding as the
way out.

Hosts are compared as `endpoints.host` normalises them (case, a trailing dot, a port, a
scheme), the same function the allow-list runs, so ``shop.servicebus.windows.net:5671`` is the
host a binding of ``shop.servicebus.windows.net`` binds.

A refused consumer writes nothing, so a consumer that was working when the overlap appeared
keeps what it handed out: its pods go on with the partitions and epochs their ConfigMaps hold,
nothing moves and no epoch is given out, so no partition gets a second owner; a pod that
leaves meanwhile keeps its partitions in the record until the overlap ends, and the first
cycle after it hands them on at new epochs, from the record (docs/failures.md).

Every consumer is summed up once per watch event (`peer`, through a kopf index), and the
summaries are indexed once per CR event (`PeerIndex`), so a decision looks up only the
consumers that name its location and those of its namespace whose selector requires one of
its pods' labels (or none), and matches their selectors against its pods.

Limits: a checkpoint location named by a connection string is known only by the Secret's
reference (two Secrets holding the same account are not seen as one; the admin's commands act
only with the identity a CR declares, so naming another's account gains a newcomer nothing);
a consumer whose spec is invalid claims nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import (
    conditions,
    endpoints,
    labelselectors,
    namespacepatterns,
    specs,
    timestamps,
)

#: The condition type, True on the newcomer of two overlapping consumers.
CONFLICT = "Conflict"
#: Its reason when True (and the Ready condition's), and when the overlap is gone.
REASON = "Conflict"
REASON_CLEARED = "NoConflict"
#: Conflict's reason when the location is bound to another namespace by the install.
REASON_BOUND = "LocationBound"
#: Conflict's reason when a consumer of another namespace holds this location, unbound.
REASON_SHARED = "LocationShared"

#: Sorts after any real creationTimestamp: a body without one is the later.
_NEVER = datetime.datetime.max.replace(tzinfo=datetime.UTC)

#: What a consumer's status says of it, best title first (`standing`): decided at its current
#: generation and not refused; not decided since its spec last changed (a new CR, an edited
#: one), refused before; refused at what it names now; refused before and changed since.
WORKING, UNDECIDED, REFUSED, REFUSED_THEN_CHANGED = 0, 1, 2, 3


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
    #: what its status says of it (`standing`): `WORKING` holds against the others
    standing: int = UNDECIDED

    @property
    def order(self) -> tuple[datetime.datetime, str, str, str]:
        """Who came first: creation time, then uid (the names only where both are unknown)."""
        return (self.created, self.uid, self.namespace, self.name)

    @property
    def title(self) -> tuple[int, datetime.datetime, str, str, str]:
        """Whose a location of several namespaces is: its standing first, then `order`."""
        return (self.standing, *self.order)

    @property
    def named(self) -> str:
        return f"EventHubConsumer {self.namespace}/{self.name}"


def location(spec: specs.ConsumerSpec, *, namespace: str) -> tuple[str, ...]:
    """The checkpoint location: the blob path's parts (lower-cased, as the blob names are; the
    Event Hubs namespace as `endpoints.host` normalises it) and the account, by its host, or by
    the Secret (in its namespace) that holds its connection string."""
    creds = spec.checkpoint_credentials
    if creds.secret_ref is not None:
        account = f"secret:{namespace}/{creds.secret_ref.name}/{creds.secret_ref.key}"
    else:
        account = endpoints.host(spec.checkpoint_account_url)
    return (
        endpoints.host(spec.fully_qualified_namespace),
        spec.event_hub_name.lower(),
        spec.consumer_group.lower(),
        account,
        spec.checkpoint_container,
    )


def hosts(location: tuple[str, ...]) -> tuple[str, ...]:
    """The hosts a location names, normalised: the Event Hubs namespace and the checkpoint
    account's host (none for a connection string's Secret, which belongs to its namespace
    already)."""
    found = [endpoints.host(location[0])] if location and location[0] else []
    account = location[3] if len(location) > 3 else ""
    if account and not account.startswith("secret:"):
        host = endpoints.host(account)
        if host:
            found.append(host)
    return tuple(found)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bindings:
    """The hosts an admin bound to one namespace each (``--bind-location NS=HOST``): only a
    consumer in that namespace may name the host as its Event Hubs namespace or checkpoint
    account. Empty: nothing is bound."""

    #: (host as `endpoints.host` normalises it, the namespace it belongs to), one per host
    hosts: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, hosts: Mapping[str, str]) -> Bindings:
        return cls(hosts=tuple(sorted((endpoints.host(h), ns) for h, ns in hosts.items())))

    @classmethod
    def parse(cls, items: Iterable[str], *, field: str) -> Bindings:
        """``NS=HOST`` items (a host or a URL), as ``--bind-location`` takes them; a malformed
        one, or a host bound to two namespaces, raises `errors.InvalidInput` naming ``field``."""
        bound: dict[str, str] = {}
        for item in items:
            namespace, sep, written = str(item).partition("=")
            namespace, host = namespace.strip(), endpoints.host(written)
            if not sep or not namespace or not host:
                raise errors.InvalidInput(
                    field, f"{item!r} is not NS=HOST (e.g. shop=shop.blob.core.windows.net)"
                )
            namespacepatterns.name(namespace, field=field)
            if bound.get(host, namespace) != namespace:
                raise errors.InvalidInput(
                    field, f"{host} is bound to two namespaces: bind it to one"
                )
            bound[host] = namespace
        return cls.of(bound)

    def owner(self, host: str) -> str | None:
        """The namespace ``host`` (any spelling of it) is bound to, if any."""
        return dict(self.hosts).get(endpoints.host(host))

    def owners(self, location: tuple[str, ...] | None) -> dict[str, str]:
        """{host: namespace} of the hosts of ``location`` that are bound."""
        if location is None or not self.hosts:
            return {}
        bound = dict(self.hosts)
        return {h: bound[h] for h in hosts(location) if h in bound}


#: No binding: the default of an install that lists none.
UNBOUND = Bindings()


def standing(body: Mapping[str, Any]) -> int:
    """What the status of a consumer's ``body`` says of it. The status is the operator's
    alone (a CR's author cannot write it, nor set it on create), and a spec change, a new
    location included, raises ``metadata.generation`` past the ``status.observedGeneration``
    of its last decision: so a consumer is `WORKING` only once a decision over what it names
    now refused it nothing."""
    meta: Mapping[str, Any] = body.get("metadata") or {}
    status: Mapping[str, Any] = body.get("status") or {}
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    current = isinstance(generation, int) and generation == observed
    found = conditions.find(status.get("conditions"), CONFLICT)
    refused = found is not None and found.get("status") == "True"
    if refused:
        return REFUSED if current else REFUSED_THEN_CHANGED
    return WORKING if current else UNDECIDED


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
        created=timestamps.parse_time(meta.get("creationTimestamp")) or _NEVER,
        selector=spec.selector if spec is not None else None,
        location=location(spec, namespace=namespace) if spec is not None else None,
        deleting=bool(meta.get("deletionTimestamp")),
        standing=standing(body),
    )


def concerning(
    peers: Iterable[Peer], *, namespace: str, location: tuple[str, ...] | None
) -> tuple[Peer, ...]:
    """The summaries a decision of a consumer of ``namespace`` at ``location`` reads (`find`):
    those of its namespace, and those of other namespaces that name its location. What another
    tenant does with consumers of its own elsewhere changes none of its decisions."""
    return tuple(
        p
        for p in peers
        if p.namespace == namespace or (location is not None and p.location == location)
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
    or the consumer of another namespace that holds its unbound location (``others``), or the
    namespace binding that keeps its location from it (``others`` empty)."""

    others: tuple[Peer, ...]
    why: str
    reason: str = REASON
    #: the hosts of a held location, either of which an admin may bind to the newcomer
    hosts: tuple[str, ...] = ()
    tied: bool = False  # created in the same second as this one: the uid decided, not age


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


class PeerIndex(tuple[Peer, ...]):
    """The peers, looked up as `find` reads them: by checkpoint location, and by namespace and
    one label each selector requires. Built once per CR event (`serving.CachedKube.peers`)
    and kept with the tuple: at 1,000 consumers in one namespace, each decision matched every
    older consumer's selector against its pods, a quarter of the operator's CPU."""

    _located: dict[tuple[str, ...] | None, list[Peer]]
    #: by (namespace, key, value) of the first label a selector requires ('' for none)
    _labelled: dict[tuple[str, str, str], list[Peer]]

    def __new__(cls, peers: Iterable[Peer] = ()) -> PeerIndex:
        self = super().__new__(cls, peers)
        self._located, self._labelled = {}, {}
        for p in self:
            self._located.setdefault(p.location, []).append(p)
            if p.selector is not None:
                key, value = next(iter(p.selector.match_labels.items()), ("", ""))
                self._labelled.setdefault((p.namespace, key, value), []).append(p)
        return self

    def at(self, location: tuple[str, ...] | None) -> list[Peer]:
        """Those that name ``location``, in any namespace."""
        return self._located.get(location, []) if location is not None else []

    def selecting(self, namespace: str, pod_labels: Sequence[Mapping[str, str]]) -> list[Peer]:
        """Those of ``namespace`` whose selector may match one of ``pod_labels``: it requires
        one of their labels, or none (each still to be matched)."""
        keys = {(namespace, "", "")} | {(namespace, *kv) for ls in pod_labels for kv in ls.items()}
        return [p for key in keys for p in self._labelled.get(key, ())]


def find(
    me: Peer,
    peers: Iterable[Peer],
    *,
    pod_labels: Sequence[Mapping[str, str]],
    bindings: Bindings = UNBOUND,
) -> Overlap | None:
    """Why ``me`` may not work: its location is bound to another namespace (`bound`), or a
    consumer of another namespace holds it (`holder`: it came first and nobody bound the
    location), or the earliest consumer of its namespace before it overlaps it; None: ``me``
    may work (it holds whatever it names).

    ``pod_labels``: the labels of the pods ``me`` selects.
    """
    refused = bound(me, bindings)
    if refused is not None:
        return refused
    index = peers if isinstance(peers, PeerIndex) else PeerIndex(peers)
    held = holder(me, index, bindings=bindings)
    if held is not None:
        return Overlap(
            others=(held,),
            why="names the same Event Hub, consumer group and checkpoint location",
            reason=REASON_SHARED,
            hosts=hosts(me.location) if me.location is not None else (),
        )
    found: Peer | None = None
    why = ""
    for other in (*index.at(me.location), *index.selecting(me.namespace, pod_labels)):
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
    tied = found is not None and found.created == me.created
    return Overlap(others=(found,), why=why, tied=tied) if found is not None else None


def holder(me: Peer, peers: Iterable[Peer], *, bindings: Bindings = UNBOUND) -> Peer | None:
    """The consumer of another namespace that holds ``me``'s location: the first by `title`
    (a consumer at work there before one that is not, then the oldest) that names it, when it
    comes before ``me`` and no binding says whose the location is (a bound location refuses
    the others instead, and never ``me`` when its namespace holds the binding)."""
    if me.location is None or bindings.owners(me.location):
        return None
    index = peers if isinstance(peers, PeerIndex) else PeerIndex(peers)
    earlier = [
        other
        for other in index.at(me.location)
        if not other.deleting and other.namespace != me.namespace and other.title < me.title
    ]
    return min(earlier, key=lambda p: p.title) if earlier else None
