"""The one rule of the cache (per object name, the highest resourceVersion wins), and the
keys kopf's indexes file bodies under, where a roster starts.

Every body the operator learns of enters a roster's shelf (`Shelf.offer`: one shelf per kind
in each consumer's roster, `rosters.Roster`), whatever brought it: a watch event, the answer
of one of the operator's own writes, or a fresh read from the API server. A name remembers
the version at which it was last removed (deleted, or gone from the selector), its floor, so
that nothing older brings it back. From that rule:

- the operator's own writes are served at once and never replaced by an older body from a
  lagging watch (the write's answer has the higher version), and an object deleted since is
  never served again (the deletion has the higher version);
- a pod relabelled away leaves the shelf at the event that says so, and a pod relabelled in
  joins it: membership and routing are the same structure;
- a fresh listing (`Shelf.resync`) removes only what it lacks *and* is no newer than itself:
  an object created after the listing was answered stays;
- while a request whose answer enters the shelf is in flight, every floor stays: the answer
  may be older than what the watch delivered meanwhile (`Shelf.passed`);
- the operator's own deletion answers no version, so its floor is unknown; the uid it deleted
  is kept instead, and no body of that uid is taken again (a uid never comes back): a
  listing asked before the deletion and answered after it does not bring the object back.

Resource versions are opaque by contract but integers on every API server we know (etcd
revisions); a version that is not an integer counts as newer, so the watch still wins.

A new roster fills its shelves from kopf's indexes (`kopfwiring` files each body under the
keys below; `tracking.Following` looks one key up per kind: its CR by name, its pods by one
of its selector's labels or the namespace, its ConfigMaps by its label). From then on the
watch handlers keep the roster, and the indexes are not read again until a selector changes.
The same pod keys route a pod event to the rosters that select it
(`rosters.Rosters.candidates`), so the keys live beside the shelves they fill.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from eventhub_balancer.contracts import configmaps, labelselectors, specs

Body = Mapping[str, Any]

#: Names remembered after they left a shelf (their removal's version), per roster and kind:
#: a late event older than the removal is ignored. A name is forgotten as soon as the watch
#: delivers a later version of its kind and no request is in flight (`Shelf.passed`), so a
#: pod churned out leaves nothing behind; the bound only holds while the watch is silent or
#: behind the operator's own reads.
MAX_FLOORS = 4096

#: The kinds a roster keeps, one shelf each.
CONSUMER, PODS, CONFIGMAPS = "consumer", "pods", "configmaps"
KINDS = (CONSUMER, PODS, CONFIGMAPS)
#: The kinds the watch delivers, as the event handlers and kopf's indexes name them: pods and
#: ConfigMaps go by their shelves' names (`PODS`, `CONFIGMAPS`); the CRs are every consumer's.
CONSUMERS = "consumers"
#: The index of every EventHubConsumer summed up for the conflict check (`conflicts.Peer`):
#: a cycle compares summaries, it parses no other consumer's spec.
PEERS = "peers"


def kept(body: Body) -> Body:
    """``body`` as the cache keeps it: without ``metadata.managedFields``, which the operator
    never reads and a real API server fills with one field tree per writer of the object (a
    pod's kubelet, a ConfigMap's pod and operator), parsed into many small dicts. A body
    without them is kept as it is."""
    metadata = body.get("metadata")
    if not isinstance(metadata, Mapping) or "managedFields" not in metadata:
        return body
    trimmed = dict(body)
    trimmed["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return trimmed


#: What of a pod's spec the operator reads: the node it is scheduled on
#: (`contracts.podstates`). The rest of a real pod's spec (containers, volumes, tolerations,
#: the service account token's projection) is most of its body, and the cache holds one body
#: per pod in kopf's index and one in each roster that selects it.
POD_SPEC_READ = ("nodeName",)


#: What of a pod's annotations the operator reads: its own two (`configmaps.pod_annotations`,
#: with ``--annotate-pods``), compared with what it would write. A tenant's pods may carry
#: 256 KB of annotations each, and the operator keeps every pod of the namespaces it serves.
POD_ANNOTATIONS_READ = (configmaps.POD_ANNOTATION_CONSUMER, configmaps.POD_ANNOTATION_PARTITIONS)
#: The longest of those kept: more than the operator writes (a consumer's name, the ids of
#: 4,096 partitions). A longer one is someone else's, kept cut (and marked) so that it still
#: differs from the operator's value, which is then written again.
MAX_POD_ANNOTATION = 32 * 1024


def _pod_annotation(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_POD_ANNOTATION:
        return value[:MAX_POD_ANNOTATION] + "\u2026"
    return value


def kept_pod(body: Body) -> Body:
    """A pod as the cache keeps it: `kept`, of its spec only `POD_SPEC_READ`, of its
    annotations only `POD_ANNOTATIONS_READ`. A pod kept so already (the watch handler trims
    it before the shelves see it) is not copied again."""
    body = kept(body)
    spec = body.get("spec")
    metadata = body.get("metadata")
    notes = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    trim_spec = isinstance(spec, Mapping) and not spec.keys() <= set(POD_SPEC_READ)
    trim_notes = isinstance(notes, Mapping) and (
        not notes.keys() <= set(POD_ANNOTATIONS_READ)
        or any(_pod_annotation(v) is not v for v in notes.values())
    )
    if not trim_spec and not trim_notes:
        return body
    trimmed = dict(body)
    if trim_spec and isinstance(spec, Mapping):
        trimmed["spec"] = {k: spec[k] for k in POD_SPEC_READ if k in spec}
    if trim_notes and isinstance(metadata, Mapping) and isinstance(notes, Mapping):
        trimmed["metadata"] = {
            **metadata,
            "annotations": {
                k: _pod_annotation(notes[k]) for k in POD_ANNOTATIONS_READ if k in notes
            },
        }
    return trimmed


def version(body: Body) -> int | None:
    """The body's resourceVersion as a number; None when it is absent or not a number."""
    return number((body.get("metadata") or {}).get("resourceVersion"))


def uid(body: Body) -> str:
    return str(meta(body).get("uid") or "")


def kept_on(body: Body) -> bool:
    """Whether ``body`` is not being deleted. One that is (its deletionTimestamp set) is held
    by someone else's finalizer (a backup or policy controller's): its DELETED comes when they
    take it off, however late, so it settles the operator's own deletion of it meanwhile."""
    return not meta(body).get("deletionTimestamp")


def number(raw: object) -> int | None:
    """A resourceVersion as a number; None when it is absent or not a number."""
    try:
        return int(str(raw)) if raw not in (None, "") else None
    except (TypeError, ValueError):
        return None


def newer(candidate: int | None, known: int | None) -> bool:
    """Whether a version is later than the one known (unknowns count as later)."""
    return candidate is None or known is None or candidate > known


def meta(body: Body) -> Mapping[str, Any]:
    """The body's metadata (empty when it has none)."""
    found: Mapping[str, Any] = body.get("metadata") or {}
    return found


def news(kind: str, before: Body, after: Body, *, touched: Iterable[str] = ()) -> bool:
    """Whether the answer ``after`` of one of the operator's writes carries a change someone
    else made to ``before`` meanwhile: what the operator does not write (a pod's
    acknowledgements on its ConfigMap, beyond the annotations ``touched``; a pod's labels,
    status and deletion; a CR's spec). Its watch event then comes older than the answer and
    changes nothing: only the answer can tell the consumer to look."""
    old, new = meta(before), meta(after)
    if kind == CONFIGMAPS:
        mine = {configmaps.ANNOTATION_POD_UID, *touched}
        theirs, ours = old.get("annotations") or {}, new.get("annotations") or {}
        return any(theirs.get(k) != ours.get(k) for k in (theirs.keys() | ours.keys()) - mine)
    fields = ("labels", "deletionTimestamp") if kind == PODS else ("generation", "labels")
    if any(old.get(f) != new.get(f) for f in fields):
        return True
    part = "status" if kind == PODS else "spec"
    return before.get(part) != after.get(part)


class Shelf:
    """The bodies of one kind in one roster, by name, with the floors of names removed."""

    def __init__(
        self,
        belongs: Callable[[Body], bool],
        *,
        departures: bool = False,
        keep: Callable[[Body], Body] = kept,
    ) -> None:
        self.belongs = belongs
        #: what of a body the shelf keeps (`kept`, `kept_pod`)
        self.keep = keep
        #: whether the names removed are kept in ``departed`` (the pods' and ConfigMaps' shelves)
        self.departures = departures
        self.items: dict[str, Body] = {}
        self.floors: collections.OrderedDict[str, int | None] = collections.OrderedDict()
        #: the names removed (deleted, or gone from the scope), newest last, each with the
        #: version it was removed at: known gone
        self.departed: collections.OrderedDict[str, int | None] = collections.OrderedDict()
        #: of ``departed``, the names that left the scope still existing (a pod relabelled)
        self.left: set[str] = set()
        #: the version of the last fresh listing of the shelf's scope; None: never listed
        self.listed: int | None = None
        #: the highest version the watch delivered
        self.watermark: int | None = None
        #: requests in flight whose answers enter this shelf (`rosters.Roster.asking`)
        self.pending = 0
        #: name -> the uid the operator deleted there (`remove` at an unknown version): a body
        #: of that uid, from a listing or a late event, is older than the deletion. Kept until
        #: the watch delivers that deletion (its floor then has a version), or `MAX_FLOORS`
        self.deleted_uids: collections.OrderedDict[str, str] = collections.OrderedDict()

    def offer(self, body: Body, *, deleted: bool = False, watched: bool = False) -> bool:
        """Take ``body`` if it is newer than what is known of its name; whether that changed
        what the shelf serves. ``watched``: the body came from the watch (`passed`)."""
        changed = self._offer(body, deleted=deleted)
        if watched:
            self.passed(version(body))
        return changed

    def passed(self, at: int | None) -> None:
        """The watch delivered version ``at``: what it delivers next is newer still (a stream
        is in order, a re-list lists what exists), so a floor at or below ``at`` can refuse
        nothing more from the watch. The floors go in the order they were set, up to the
        first newer one. While a request is in flight (`pending`) they all stay: its answer
        may be older than the watch, and a floor is what keeps a name removed since from
        coming back with it."""
        if at is None:
            return
        if self.watermark is None or at > self.watermark:
            self.watermark = at
        if self.pending:
            return
        while self.floors:
            name, floor = next(iter(self.floors.items()))
            if floor is not None and floor > at:
                return
            del self.floors[name]

    def _offer(self, body: Body, *, deleted: bool) -> bool:
        name = str(meta(body).get("name") or "")
        if not name:
            return False
        uid = str(meta(body).get("uid") or "")
        seen = version(body)
        if self.deleted_uids.get(name) == uid:
            if not deleted:
                return False  # the operator deleted that very object: this body is older
            if seen is not None:
                # The watch delivered that deletion, at a version: the floor it leaves below
                # keeps older bodies out from now on, so the uid is not remembered for good
                # (one per pod churned out, in every roster, for the operator's life).
                del self.deleted_uids[name]
        current = self.items.get(name)
        known = version(current) if current is not None else self.floors.get(name)
        if (current is not None or name in self.floors) and not newer(seen, known):
            return False
        if deleted or not self.belongs(body):
            # Only a name the shelf held, or the deletion of one it selects, is remembered:
            # what concerns another consumer leaves no trace here.
            if current is not None or name in self.floors or (deleted and self.belongs(body)):
                self._remove(name, at=seen, left=not deleted)
            return current is not None
        self.items[name] = self.keep(body)
        self.floors.pop(name, None)
        self.deleted_uids.pop(name, None)
        self.departed.pop(name, None)
        self.left.discard(name)
        return True

    def remove(self, name: str, *, at: int | None, uid: str = "") -> bool:
        """Remove ``name`` (of ``uid``, when given) as of version ``at``."""
        current = self.items.get(name)
        held = str(meta(current).get("uid") or "") if current is not None else ""
        if current is None or (uid and held != uid):
            return False
        self._remove(name, at=at)
        if at is None and held:
            self.deleted_uids[name] = held
            self.deleted_uids.move_to_end(name)
            while len(self.deleted_uids) > MAX_FLOORS:
                self.deleted_uids.popitem(last=False)
        return True

    def _remove(self, name: str, *, at: int | None, left: bool = False) -> None:
        self.items.pop(name, None)
        self.floors[name] = at
        self.floors.move_to_end(name)
        while len(self.floors) > MAX_FLOORS:
            self.floors.popitem(last=False)
        if self.departures:
            # A name removed again keeps the version of its first removal: the operator's own
            # deletion (at None) stays its own when the watch brings its DELETED later.
            self.departed.setdefault(name, at)
            self.departed.move_to_end(name)
            (self.left.add if left else self.left.discard)(name)
            while len(self.departed) > MAX_FLOORS:
                self.left.discard(self.departed.popitem(last=False)[0])

    def resync(
        self, listed: Iterable[Body], *, at: int | None, present: set[str] | None = None
    ) -> bool:
        """A fresh listing of the shelf's scope, answered at version ``at``: take what it has,
        and remove what it lacks unless that is newer than the listing. ``present``: every
        name the listing holds, when ``listed`` is only the part of it for this shelf."""
        changed = False
        names: set[str] = set()
        for body in listed:
            names.add(str(meta(body).get("name") or ""))
            changed |= self.offer(body)
        if present is not None:
            names = present
        for name in [n for n in self.items if n not in names]:
            if at is None or not newer(version(self.items[name]), at):
                self._remove(name, at=at)
                changed = True
        if at is not None and (self.listed is None or at > self.listed):
            self.listed = at
        return changed


# --- the keys kopf's indexes file bodies under (`kopfwiring`) ---


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


def pod_scope(selector: specs.Selector, scope: labelselectors.Selector | None) -> tuple[str, str]:
    """What a roster's pods are selected by, and found by: a consumer's own selector, and that
    selector among the pods the operator watches (``scope``, ``--pod-selector``). The first
    keeps apart two consumers whose selectors differ only by what the scope requires anyway."""
    return selector.to_query(), selector.both(scope).to_query()


def configmap_key(namespace: str, labels: Mapping[str, str]) -> tuple[str, str] | None:
    """A ConfigMap is filed under its consumer's label, when it has one."""
    consumer = labels.get(configmaps.LABEL_CONSUMER)
    return (namespace, consumer) if consumer else None
