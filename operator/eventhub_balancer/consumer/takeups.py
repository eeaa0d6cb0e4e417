"""What the pod answers on /readyz about its assignment: taken up, or waited for long enough.

The pod is NotReady while it takes up a new generation (its partitions fenced, or reported),
so that the operator, and a rolling update, see when it runs what it was given. Taking up
waits on Azure: the checkpoint store's fence, and for some start positions and checkpoints
a partition's bounds from Event Hubs. In an outage those calls give up only after their own
budgets (20 s for the store, 15 s for a management call), and the operator counts a pod
NotReady for ``podGraceSeconds`` (20 s by default) as gone: it takes every partition the pod
owns, on every pod given a new generation at once. So the pod waits for a take-up NotReady
for `ready_bound` at most (10 s, less under a shorter grace the operator writes in the
ConfigMap), counted from the first generation it has not taken up (a newer one meanwhile
does not start the wait again), and is Ready after it, saying what it still waits for. Its
acknowledgement still waits for the partitions themselves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final

from eventhub_balancer.contracts import partitionreports

#: The longest a take-up keeps the pod NotReady: long enough for a rolling update to wait
#: on a take-up that the store answers, and well within the default grace of 20 s.
TAKE_UP_READY_S: Final = 10.0
#: What the operator may see of a NotReady beyond the pod's own: the kubelet probes every
#: second (the consumer chart's period) so it sees the pod Ready up to 1 s late; the Ready
#: condition's lastTransitionTime keeps whole seconds, so the operator's count may start up
#: to 1 s before the pod turned NotReady; the kubelet's status write and the operator's
#: watch take the last second. The operator's cycle adds nothing: it plans a cycle for the
#: very end of a NotReady pod's grace, and judges the pod as its watch last saw it.
TAKE_UP_MARGIN_S: Final = 3.0


def ready_bound(pod_grace_seconds: int | None) -> float:
    """How long a take-up may keep the pod NotReady under the grace its ConfigMap says.

    The grace less `TAKE_UP_MARGIN_S`, and `TAKE_UP_READY_S` at most. A grace the margin
    takes whole (3 s or less, 0 included: the user wants a NotReady pod's partitions moved at
    once) gives 0: a take-up never makes the pod NotReady, since one probe that found it so
    could cost it every partition, and a rolling update that does not wait for a take-up
    costs less than that. None (no grace written: the default, which gives the same 10 s, or
    an operator from before the key) gives `TAKE_UP_READY_S`, as before the key."""
    if pod_grace_seconds is None:
        return TAKE_UP_READY_S
    return max(0.0, min(TAKE_UP_READY_S, pod_grace_seconds - TAKE_UP_MARGIN_S))


class TakeUp:
    """Since when the pod waits for a generation to be taken up (None: it does not)."""

    def __init__(self) -> None:
        self.since: float | None = None

    def read(self, generation: int, *, taken: int | None, now: float) -> None:
        """A generation was read: the wait starts unless it is taken up or already running."""
        if generation != taken and self.since is None:
            self.since = now

    def done(self) -> None:
        self.since = None

    def overdue(self, now: float, bound: float) -> bool:
        return self.since is not None and now - self.since >= bound


def of_generation(
    *,
    generation: int,
    taken: int | None,
    applied: int | None,
    overdue: bool,
    untaken: Collection[str],
    releasing: Collection[str],
    reports: Mapping[str, partitionreports.PartitionReport],
    bound: float,
) -> tuple[bool, str]:
    """Ready when ``generation`` is ``taken`` up, or its take-up is ``overdue`` (past
    ``bound``; the partitions ``untaken`` are waited for), with the reason; a release still
    running and a partition in trouble (reported) are said, never a reason to be NotReady."""
    if taken != generation and not overdue:
        return False, f"generation {generation} not applied yet (applied: {applied})"
    if taken != generation:
        waiting = ", ".join(sorted(untaken)) or "the Event Hub and checkpoint store it names"
        reason = f"generation {generation} not taken up within {bound:g} s; waiting for: {waiting}"
        if releasing:
            reason += f"; releasing: {', '.join(sorted(releasing))}"
    elif applied != generation:  # only releases left: Ready all the same
        reason = f"generation {generation} taken up; releasing: {', '.join(sorted(releasing))}"
    else:
        reason = f"generation {generation} applied"
    listed = ", ".join(f"{p} {r.state}" for p, r in sorted(reports.items()) if r.state)
    return True, f"{reason}; reported: {listed}" if listed else reason
