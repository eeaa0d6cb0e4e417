"""What a Pod body means for balancing: a ready, notready or terminating member, or gone.

Kubernetes already knows which consumers are alive (readiness probes, deletion timestamps);
this is where that knowledge becomes the planner's member state, with ``since`` taken from
the cluster's own timestamps (the Ready condition's lastTransitionTime, the
deletionTimestamp) so that a restarted operator measures the grace period from the same
instant as the one before it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, conditions, timestamps


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodState:
    """A pod as a member; ``state`` None: finished (Succeeded/Failed), owns nothing."""

    name: str
    uid: str
    state: models.MemberState | None
    since: datetime.datetime
    #: NotReady only: on a node, its containers starting or running (`models.Member.starting`)
    starting: bool = False
    #: The Deployment's revision the pod runs: (Deployment, pod-template-hash, creation
    #: time), read from its ReplicaSet owner; None for a pod no Deployment made
    revision: tuple[str, str, datetime.datetime] | None = None
    #: Ready only: this Ready spell began within `RESTART_WINDOW` of a container's
    #: termination (`models.Member.restarted`)
    restarted: bool = False
    #: NotReady only: what its containers wait on (``CrashLoopBackOff``, ``ImagePullBackOff``,
    #: ``Unschedulable``), as the kubelet or the scheduler says; empty when none says
    cause: str = ""
    #: What the kubelet or the scheduler says of a `DETAILED` cause (``secret "x" not found``)
    detail: str = ""
    #: Terminating only: when it stopped being Ready, if before its deletion began
    #: (`models.Member.notready_since`): a pod its node's lost contact marked NotReady
    notready_since: datetime.datetime | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def left(self, *, now: float) -> str:
        """Why the planner counts this pod, still listed, as gone at ``now`` (seconds), as an
        Event says it: "gone" when there is no more to say (a pod that released on its
        SIGTERM); a pod no longer listed is "gone" without asking."""
        if self.state is None:
            return "its containers ended: the pod Succeeded or Failed"
        if self.state == "terminating" and self.notready_since is not None:
            waited = now - to_seconds(self.notready_since)
            return (
                f"terminating, NotReady for {waited:.0f} s since before its deletion, past "
                "podGraceSeconds: its node may be lost"
            )
        if self.state == "notready":
            return f"NotReady for {now - to_seconds(self.since):.0f} s, past podGraceSeconds"
        return "gone"


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: The longest termination grace period taken at its word (a year): beyond it, the
#: deletionTimestamp alone is the moment the pod began terminating.
MAX_GRACE = 365 * 24 * 3600
#: A terminating pod's Ready condition turned False this long before its deletion began: it
#: was NotReady before it was deleted (its node lost, say), not because of its SIGTERM. The
#: kubelet stamps that NotReady on its node's clock and the API server the deletion to the
#: second, so a NotReady stamped closer to the deletion may have followed it.
NOTREADY_BEFORE_DELETION = 5.0
#: A Ready spell that began this long after a container's termination or sooner follows a
#: restart: the kubelet's longest back-off between restarts is 5 minutes, and it forgets a
#: crash loop after 10 minutes of running.
RESTART_WINDOW = 600.0
#: The causes whose message names what to change (a Secret, an image, a node's room), said in
#: `DETAIL` characters at most (cut between words); a crash loop's is its back-off: not said.
DETAILED = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RunContainerError",
    "Unschedulable",
)
DETAIL = 160
#: A container that keeps crashing: what it said as it last ended is the detail.
CRASH_LOOP = "CrashLoopBackOff"
#: The termination message's lines read back for it (a kubelet keeps 80 of a log's), and those
#: that say how the process went, not why it ended: a DEBUG or INFO log line, text or JSON.
LAST_LINES = 80
ROUTINE = re.compile(r'^(\S+ \S+ )?(DEBUG|INFO)\b|"level": *"(DEBUG|INFO)"')


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """Running + Ready + no deletionTimestamp = ready; a deletionTimestamp = terminating."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    name = str(meta.get("name", ""))
    uid = str(meta.get("uid", ""))
    created = timestamps.parse_time(meta.get("creationTimestamp")) or _EPOCH
    deleted = timestamps.parse_time(meta.get("deletionTimestamp"))
    if deleted is not None:
        # The deletionTimestamp is when the grace period ends; it began, with the pod's
        # SIGTERM, that many seconds before (to the second, as the API server writes it).
        grace = meta.get("deletionGracePeriodSeconds")
        if isinstance(grace, int) and not isinstance(grace, bool) and 0 <= grace <= MAX_GRACE:
            deleted -= datetime.timedelta(seconds=grace)
        unready = _ready_condition(status)
        unready_since = timestamps.parse_time(unready.get("lastTransitionTime"))
        if unready.get("status") == "True" or (
            unready_since and (deleted - unready_since).total_seconds() < NOTREADY_BEFORE_DELETION
        ):
            unready_since = None  # Ready, or NotReady since its SIGTERM: it releases
        return PodState(
            name=name, uid=uid, state="terminating", since=deleted, notready_since=unready_since
        )
    phase = status.get("phase", "Pending")
    revision = _revision(meta, created)
    if phase in ("Succeeded", "Failed"):
        # Its containers are gone: nobody will acknowledge a release, take over at once.
        return PodState(name=name, uid=uid, state=None, since=created)
    ready_condition = _ready_condition(status)
    since = timestamps.parse_time(ready_condition.get("lastTransitionTime")) or created
    if phase == "Running" and ready_condition.get("status") == "True":
        ended = [t for t in map(timestamps.parse_time, _terminations(status)) if t is not None]
        restarted = any(0 <= (since - t).total_seconds() <= RESTART_WINDOW for t in ended)
        return PodState(
            name=name, uid=uid, state="ready", since=since, revision=revision, restarted=restarted
        )
    # A pod the scheduler has not placed may wait for a node indefinitely; one on a node is
    # pulling its images, starting its containers or waiting for its readiness probe.
    starting = phase == "Running" or (phase == "Pending" and _scheduled(pod))
    return PodState(
        name=name,
        uid=uid,
        state="notready",
        since=since,
        starting=starting,
        revision=revision,
        cause=(cause := _cause(status))[0],
        detail=cause[1],
    )


def _ready_condition(status: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = {}
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            found = condition
    return found


def _cause(status: Mapping[str, Any]) -> tuple[str, str]:
    """The first container's waiting (or terminated) reason, else the scheduler's, else how
    often the containers restarted when one ended since the pod turned NotReady (within
    `RESTART_WINDOW` before): a crash loop between its back-offs, running again but not Ready;
    with it, the message of a `DETAILED` reason, on one line."""
    said: list[object] = []
    for container in status.get("containerStatuses") or []:
        now = container.get("state") if isinstance(container, Mapping) else None
        said += [now.get(key) for key in ("waiting", "terminated") if isinstance(now, Mapping)]
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") != "True":
            said.append({**c, "reason": str(c.get("reason") or "Unscheduled")})
    for found in said:
        if isinstance(found, Mapping) and isinstance(reason := found.get("reason"), str):
            told = found.get("message") if reason in DETAILED else _last_words(status, reason)
            return bounds.printable(reason[:64]), _one_line(told)
    since = timestamps.parse_time(_ready_condition(status).get("lastTransitionTime"))
    ended = [t for t in map(timestamps.parse_time, _terminations(status)) if t is not None]
    if since is not None and any((since - t).total_seconds() <= RESTART_WINDOW for t in ended):
        counts = [c.get("restartCount") for c in _containers(status)]
        if restarts := sum(n for n in counts if type(n) is int and n > 0):
            told = _last_words(status, CRASH_LOOP)
            return f"restarted {restarts} time{'' if restarts == 1 else 's'}", _one_line(told)
    return "", ""


def _last_words(status: Mapping[str, Any], reason: str) -> str:
    """In a crash loop, why its container last ended: a reason other than ``Error``
    (``OOMKilled``), else the last line of its termination message (what it wrote to its
    termination log, or its log's tail under ``FallbackToLogsOnError``) that is not a DEBUG or
    INFO log line: a JSON one's ``message``."""
    for ended in (_ended(c) for c in _containers(status)) if reason == CRASH_LOOP else ():
        if (why := ended.get("reason")) not in (None, "", "Error", "Completed"):
            return str(why)
        for line in reversed(str(ended.get("message") or "").splitlines()[-LAST_LINES:]):
            if not line.strip() or ROUTINE.search(line[:200]):
                continue
            with contextlib.suppress(ValueError, RecursionError):  # not JSON, or nested too deep
                line = str(json.loads(line).get("message") or line) if line[:1] == "{" else line
            return line
    return ""


def _one_line(told: object) -> str:
    return bounds.printable(conditions.shorten(" ".join(str(told or "").split()), DETAIL))


class Kept(NamedTuple):
    """A NotReady pod (evicted or not) keeping partitions through its grace."""

    pod: str
    partitions: int
    until: datetime.datetime  # when its grace ends and the Ready pods take them


def kept(
    states: Mapping[str, PodState], owners: Iterable[str | None], *, grace: float
) -> list[Kept]:
    """The NotReady pods among ``owners`` (one per partition held), with what they keep and
    until when: their grace counts from NotReady (a terminating pod's only when it was
    NotReady before its deletion; the others release on their SIGTERM). First ends first."""
    held = collections.Counter(o for o in owners if o is not None)
    found = []
    for name, count in held.items():
        s = states.get(name)
        since = None if s is None else s.since if s.state == "notready" else s.notready_since
        if since is not None:
            found.append(Kept(name, count, since + datetime.timedelta(seconds=grace)))
    return sorted(found, key=lambda k: (k.until, models.name_key(k.pod)))


#: The label a Deployment puts on its pods: the hash of the pod template, which ends the name
#: of the ReplicaSet that made them.
TEMPLATE_HASH = "pod-template-hash"


def _revision(
    meta: Mapping[str, Any], created: datetime.datetime
) -> tuple[str, str, datetime.datetime] | None:
    labels = meta.get("labels") or {}
    template = labels.get(TEMPLATE_HASH) if isinstance(labels, Mapping) else None
    if not isinstance(template, str) or not template:
        return None
    for owner in meta.get("ownerReferences") or []:
        name = owner.get("name") if isinstance(owner, Mapping) else None
        if owner.get("kind") == "ReplicaSet" and isinstance(name, str):
            deployment, dash, tail = name.rpartition("-")
            if dash and tail == template:
                return deployment, template, created
    return None


def outgoing(states: Iterable[PodState]) -> frozenset[str]:
    """The pods a rolling update replaces: those, neither terminating nor finished, of a
    Deployment whose newest pod (the last created) runs another revision. A rollback makes
    the old revision's new pods the newest, so the abandoned revision's pods are the ones
    replaced, as the Deployment does."""
    running: list[tuple[str, str, str]] = []
    #: each Deployment's newest pod: (creation time, name, pod-template-hash)
    newest: dict[str, tuple[datetime.datetime, str, str]] = {}
    for s in states:
        if s.revision is None or s.state not in ("ready", "notready"):
            continue
        deployment, template, created = s.revision
        running.append((s.name, deployment, template))
        mine = (created, s.name, template)
        newest[deployment] = max(newest.get(deployment, mine), mine)
    return frozenset(
        name for name, deployment, template in running if template != newest[deployment][2]
    )


def _terminations(status: Mapping[str, Any]) -> tuple[object, ...]:
    """When the pod's containers last ended (``lastState.terminated.finishedAt``), as written."""
    return tuple(e.get("finishedAt") for c in _containers(status) if (e := _ended(c)))


def _containers(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)]


def _ended(container: Mapping[str, Any]) -> Mapping[str, Any]:
    """How ``container`` last ended (``lastState.terminated``); empty: it has not."""
    last = container.get("lastState")
    ended = last.get("terminated") if isinstance(last, Mapping) else None
    return ended if isinstance(ended, Mapping) else {}


def _scheduled(pod: Mapping[str, Any]) -> bool:
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    return any(
        isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def state_inputs(pod: Mapping[str, Any]) -> tuple[object, ...]:
    """All that `pod_state` reads of ``pod``: equal inputs give an equal state, so a caller
    that kept a state with its inputs (a copy) may use it again for a pod that reads the same."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return (
        meta.get("name", ""),
        meta.get("uid", ""),
        meta.get("creationTimestamp"),
        meta.get("deletionTimestamp"),
        status.get("phase", "Pending"),
        status.get("conditions"),
        (pod.get("spec") or {}).get("nodeName"),
        (meta.get("labels") or {}).get(TEMPLATE_HASH),
        repr(meta.get("ownerReferences")),
        _terminations(status),
        _cause(status),
    )


#: How long before this operator first saw a pod's state (on its own clock) that state may
#: have begun, when it saw the pod in another state before: a watch event's way and the
#: wait for a cycle. A ``since`` stamped earlier than that came from a clock behind.
SEEN_LATE = 5.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sighting:
    """When this operator first saw a pod in its current state, on the operator's clock.

    The pod's ``since`` comes from another clock (its node's kubelet, the API server), which
    may be minutes off. The state began no later than it was first seen, and, when the same
    pod was seen before in another state, no sooner than `SEEN_LATE` before that."""

    body: object  # the body last seen: an unchanged one is the same object
    key: tuple[object, ...]  # what ``since`` is read from
    first: float
    witnessed: bool

    def applied(self, state: PodState) -> PodState:
        since = to_seconds(state.since)
        earliest = self.first - SEEN_LATE if self.witnessed else since
        seen = min(max(since, earliest), self.first)
        return state if seen == since else dataclasses.replace(state, since=from_seconds(seen))


def _since_key(pod: Mapping[str, Any]) -> tuple[object, ...]:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    ready = _ready_condition(status)
    return (
        meta.get("uid"),
        meta.get("creationTimestamp"),
        meta.get("deletionTimestamp"),
        meta.get("deletionGracePeriodSeconds"),
        status.get("phase"),
        ready.get("status"),
        ready.get("lastTransitionTime"),
    )


def sightings(
    previous: Mapping[str, Sighting], pods: Iterable[Mapping[str, Any]], *, wall: float
) -> dict[str, Sighting]:
    """Each pod's `Sighting` after a cycle at ``wall`` read ``pods``: kept (the very object)
    while the pod's body, or what its ``since`` is read from, stays the same."""
    result: dict[str, Sighting] = {}
    for body in pods:
        name = str((body.get("metadata") or {}).get("name") or "")
        old = previous.get(name)
        if old is not None and old.body is body:
            result[name] = old
            continue
        key = _since_key(body)
        if old is not None and old.key == key:
            result[name] = dataclasses.replace(old, body=body)
        else:
            seen_before = old is not None and old.key[0] == key[0]
            result[name] = Sighting(body=body, key=key, first=wall, witnessed=seen_before)
    return result


def to_seconds(value: datetime.datetime) -> float:
    """The planner's time unit: seconds since the Unix epoch."""
    return value.timestamp()


def from_seconds(value: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
