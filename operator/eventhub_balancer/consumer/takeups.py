"""What the pod answers on /readyz about its assignment: taken up, or waited for long enough.

The pod is NotReady while it takes up a new generation (its partitions fenced, or reported),
so that the operator, and a rolling update, see when it runs what it was given. Taking up
waits on Azure: the checkpoint store's fence, and for some start positions and checkpoints
a partition's bounds from Event Hubs. In an outage those calls give up only after their own
budgets (20 s for the store, 15 s for a management call), and the operator counts a pod
NotReady for ``podGraceSeconds`` (20 s by default) as gone: it takes every partition the pod
owns, on every pod given a new generation at once. So the pod waits for a take-up NotReady
for `TAKE_UP_READY_S` at most, counted from the first generation it has not taken up (a
newer one meanwhile does not start the wait again), and is Ready after it, saying what it
still waits for. Its acknowledgement still waits for the partitions themselves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final

from eventhub_balancer.contracts import partitionreports

#: The longest a take-up keeps the pod NotReady: within ``podGraceSeconds`` (20 s), with
#: room for the readiness probe's period and the operator's cycle.
TAKE_UP_READY_S: Final = 10.0


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

    def overdue(self, now: float) -> bool:
        return self.since is not None and now - self.since >= TAKE_UP_READY_S


def of_generation(
    *,
    generation: int,
    taken: int | None,
    applied: int | None,
    overdue: bool,
    untaken: Collection[str],
    releasing: Collection[str],
    reports: Mapping[str, partitionreports.PartitionReport],
) -> tuple[bool, str]:
    """Ready when ``generation`` is ``taken`` up, or its take-up is ``overdue`` (the
    partitions ``untaken`` are waited for), with the reason; a release still running and a
    partition in trouble (reported) are said, never a reason to be NotReady."""
    if taken != generation and not overdue:
        return False, f"generation {generation} not applied yet (applied: {applied})"
    if taken != generation:
        waiting = ", ".join(sorted(untaken)) or "the Event Hub and checkpoint store it names"
        reason = (
            f"generation {generation} not taken up within {TAKE_UP_READY_S:.0f} s; "
            f"waiting for: {waiting}"
        )
        if releasing:
            reason += f"; releasing: {', '.join(sorted(releasing))}"
    elif applied != generation:  # only releases left: Ready all the same
        reason = f"generation {generation} taken up; releasing: {', '.join(sorted(releasing))}"
    else:
        reason = f"generation {generation} applied"
    listed = ", ".join(f"{p} {r.state}" for p, r in sorted(reports.items()))
    return True, f"{reason}; reported: {listed}" if reports else reason
