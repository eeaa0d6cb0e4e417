"""How long the operator waits before asking a failed dependency again: pure arithmetic.

The operator's memory between cycles (`handlers.memories.Memory`) keeps one `Backoff` for
Event Hubs and one for the checkpoint store; the readers in `handlers.observing` consult and
advance them with ``wall`` (seconds) passed in, so the pacing is tested without a clock.

A fault that may pass (an outage, a throttle) is asked again sooner, then later and later
(`after_failure`). A configuration error (a connection string that can never work, a host the
install does not allow) fails the same way until someone changes the CR or its Secret, so it
waits the longest delay at once, and no longer than until the CR points elsewhere
(`after_misconfiguration`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable

#: The longest backoff between attempts to reach Event Hubs or the checkpoint store: five
#: minutes keeps a long outage cheap and still notices the recovery within minutes.
MAX_BACKOFF_SECONDS = 300.0
#: The longest backoff while an Event Hub or consumer group does not exist: someone creates it
#: outside the cluster and then waits for the consumer to take it up, and asking again costs
#: one listing and one link (`adapters.consumergroups`), so it is asked at most every 30 s.
MISSING_BACKOFF_SECONDS = 30.0
#: How often the checkpoint store is probed when nothing needs its epochs, only so that the
#: CheckpointStoreReachable condition stays true to the facts (a minute is cheap: one listing).
CHECKPOINT_PROBE_SECONDS = 60.0
#: How old a listing of the blobs made ahead (after a cycle that started hand-offs) may be and
#: still stand for the listing a cycle that gives partitions out makes: a release comes within
#: this in practice.
AHEAD_SECONDS = 10.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Backoff:
    """The last delay and when the next attempt is due; the zero value: not backing off."""

    delay: float = 0.0
    retry_at: float = 0.0
    #: after a configuration error, the spec's settings it was found under (no secret: the
    #: references to them); None: a fault that may pass
    refused: Hashable | None = None

    def waiting(self, wall: float, *, settings: Hashable | None = None) -> bool:
        """Whether an attempt at ``wall`` would come too soon after the last failure: never
        once ``settings`` differ from those a configuration error was found under."""
        if self.refused is not None and settings is not None and settings != self.refused:
            return False
        return wall < self.retry_at


def after_failure(
    backoff: Backoff, *, wall: float, base: float, longest: float = MAX_BACKOFF_SECONDS
) -> Backoff:
    """Double the delay (at least ``base``, the cycle interval; at most ``longest``)."""
    delay = min(longest, max(base, backoff.delay * 2))
    return Backoff(delay=delay, retry_at=wall + delay)


def after_misconfiguration(*, wall: float, settings: Hashable) -> Backoff:
    """Wait the longest delay at once: asking again changes nothing until the CR's
    ``settings`` change (`Backoff.waiting`) or its Secret does (read afresh at the retry)."""
    return Backoff(delay=MAX_BACKOFF_SECONDS, retry_at=wall + MAX_BACKOFF_SECONDS, refused=settings)


def probe_due(checked_at: float | None, *, wall: float) -> bool:
    """Whether the checkpoint store should be read for its condition alone."""
    return checked_at is None or wall - checked_at >= CHECKPOINT_PROBE_SECONDS


def next_probe(checked_at: float | None, backoff: Backoff) -> float:
    """When the store is next read for its condition alone (`probe_due`, past the backoff)."""
    due = -math.inf if checked_at is None else checked_at + CHECKPOINT_PROBE_SECONDS
    return max(backoff.retry_at, due)


def ahead_stands(at: float | None, *, wall: float) -> bool:
    """Whether a listing of the blobs made ahead at ``at`` stands for a read at ``wall``."""
    return at is not None and 0 <= wall - at <= AHEAD_SECONDS
