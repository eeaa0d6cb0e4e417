"""Faults of the watch streams: the local API server's watches can lag, stall, expire or end.

A real API server's watches are not prompt by contract: its watch cache can fall behind the
writes it has already acknowledged, a stream can go silent without closing, a resume from an
old resourceVersion gets 410 Gone, and streams end whenever the server likes. A client that
is safe only with prompt watches is not safe. These faults let tests and the chaos run show
what the operator does when its watches misbehave while writes still succeed at once.

A fault is a value with a time window on the serving loop's clock; the decisions below take
``now`` as an argument and hold no state, so the serving loop (`serving`) and the tests use
the same rules. Each fault targets one resource (by plural: ``pods``, ``configmaps``,
``eventhubconsumers``) or every resource (``None``).

- ``lag``: every event of a watch is delivered ``lag_s`` after the watch received it, at the
  latest when the fault ends (the stream then catches up). Bookmarks carry the version of the
  last event delivered, never a later one, as a lagging watch cache's do.
- ``stall``: the stream stays open and sends nothing, no events and no bookmarks, until the
  fault ends (then it delivers what it held) or the client gives up.
- ``gone``: a watch resuming from a resourceVersion below the one current when the fault
  began gets one ``ERROR`` event with 410 Expired and ends, as after a compaction: the client
  must list again. A fresh list's version is past that point, so the watch that follows it
  works.
- ``close``: every stream open while the fault is active ends ``close_after_s`` after it
  opened or after the fault began, whichever is later (0: at once).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Final, Literal

Kind = Literal["lag", "stall", "gone", "close"]
KINDS: Final[tuple[Kind, ...]] = ("lag", "stall", "gone", "close")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchFault:
    """One fault, active from ``starts`` until ``ends`` (seconds on the serving loop's clock)."""

    kind: Kind
    #: The resource's plural (``configmaps``), or None for every resource.
    plural: str | None
    starts: float
    ends: float
    #: ``lag``: how late each event is delivered.
    lag_s: float = 0.0
    #: ``close``: how long a stream lives once the fault has begun.
    close_after_s: float = 0.0
    #: ``gone``: a resume from a resourceVersion below this gets 410.
    gone_below: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown watch fault {self.kind!r}: one of {', '.join(KINDS)}")
        if not self.ends > self.starts:
            raise ValueError(
                f"a watch fault must last: it starts at {self.starts}, ends {self.ends}"
            )
        if self.lag_s < 0 or self.close_after_s < 0:
            raise ValueError("lag_s and close_after_s must not be negative")
        if self.kind == "lag" and self.lag_s <= 0:
            raise ValueError("a lag fault needs lag_s above 0")

    def active(self, now: float) -> bool:
        return self.starts <= now < self.ends

    def targets(self, plural: str) -> bool:
        return self.plural is None or self.plural == plural


def make(
    kind: str,
    *,
    now: float,
    seconds: float,
    plural: str | None = None,
    lag_s: float = 0.0,
    close_after_s: float = 0.0,
    gone_below: int = 0,
) -> WatchFault:
    """A fault that begins ``now`` and lasts ``seconds``; ValueError for a malformed one."""
    if kind not in KINDS:
        raise ValueError(f"unknown watch fault {kind!r}: one of {', '.join(KINDS)}")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"a watch fault lasts a finite time above 0, not {seconds}")
    return WatchFault(
        kind=kind,
        plural=plural or None,
        starts=now,
        ends=now + seconds,
        lag_s=lag_s,
        close_after_s=close_after_s,
        gone_below=gone_below,
    )


def _active(faults: Iterable[WatchFault], kind: Kind, plural: str, now: float) -> list[WatchFault]:
    return [f for f in faults if f.kind == kind and f.targets(plural) and f.active(now)]


def hold_until(faults: Iterable[WatchFault], *, plural: str, received: float) -> float:
    """When an event a watch received at ``received`` may be sent (``received``: at once)."""
    faults = tuple(faults)
    due = received
    for fault in _active(faults, "lag", plural, received):
        due = max(due, min(received + fault.lag_s, fault.ends))
    for fault in _active(faults, "stall", plural, received):
        due = max(due, fault.ends)
    return due


def stalled(faults: Iterable[WatchFault], *, plural: str, now: float) -> bool:
    """The stream sends nothing now, not even a bookmark."""
    return bool(_active(faults, "stall", plural, now))


def lagging(faults: Iterable[WatchFault], *, plural: str, now: float) -> bool:
    return bool(_active(faults, "lag", plural, now))


def gone(faults: Iterable[WatchFault], *, plural: str, since: int, now: float) -> WatchFault | None:
    """The fault that expires a resume from ``since`` now, if any."""
    for fault in _active(faults, "gone", plural, now):
        if since < fault.gone_below:
            return fault
    return None


def closes_at(faults: Iterable[WatchFault], *, plural: str, opened: float) -> float | None:
    """When a stream opened at ``opened`` is ended early, or None: the earliest moment a close
    fault that targets it is active and the stream has lived ``close_after_s`` within it."""
    moments = []
    for fault in faults:
        if fault.kind != "close" or not fault.targets(plural):
            continue
        moment = max(opened, fault.starts) + fault.close_after_s
        if moment < fault.ends:
            moments.append(moment)
    return min(moments) if moments else None


def next_change(faults: Iterable[WatchFault], *, plural: str, now: float) -> float | None:
    """The next moment after ``now`` when a fault on ``plural`` begins or ends."""
    moments = [t for f in faults if f.targets(plural) for t in (f.starts, f.ends) if t > now]
    return min(moments) if moments else None


def current(faults: Iterable[WatchFault], *, now: float) -> tuple[WatchFault, ...]:
    """The faults not over yet."""
    return tuple(f for f in faults if f.ends > now)
