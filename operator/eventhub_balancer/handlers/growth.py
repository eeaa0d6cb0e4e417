"""Partitions added to an Event Hub are given out within about a quarter second.

Event Hubs tells nobody that a hub grew: the SDK's own processors list the partition ids every
10 s, from every pod. A cycle re-reads its consumer's list only when that list is older than
`adapters.partitionlists.REFRESH_SECONDS` (60 s), so growth waited up to a minute to be noticed,
although the cycle that notices it gives the new partitions out at once. So each operator runs
one watch that lists the hubs it serves four times a second (`GROWTH_POLL_SECONDS`): one
listing per hub (namespace, name and credentials) however many consumers share it. A listing
longer than a consumer's cached list becomes that list (`ports.HubPort.grow`) and wakes the
consumer, whose next cycle, at once, gives the new partitions out.

The listings of the whole operator share one budget, `LISTINGS_PER_SECOND`, spaced evenly
(`Polls`). The hubs are listed oldest first, each at most once per `GROWTH_POLL_SECONDS`; with
more hubs than the budget allows at that period (five, at 20 listings a second), each hub is
listed less often, in proportion: at 1,000 hubs, every 50 s. Never more often than the
budget, whatever the fleet.

A failed listing is no fault to report: the cycle's own read reports faults and backs off. The
watch logs it at DEBUG and lets that hub rest, twice as long after each failure in a row (2 s,
4 s, ... up to `FAILED_REST_MAX_SECONDS`), so that a hub whose credentials were rotated costs a
failed request a minute, not four a second; the cached list stays as it was. The watch makes no
Kubernetes request. It keeps nothing per consumer: the hubs come from the partition cache, so a
hub whose consumers are all forgotten (`ports.HubPort.forget`, when a daemon stops) is dropped
at the watch's next look at the hubs, within a quarter second.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence

from eventhub_balancer import errors
from eventhub_balancer.handlers import ports

logger = logging.getLogger(__name__)

#: A hub is listed at most this often: growth is seen within about this, plus the listing.
#: Four listings a second for one hub are a small load beside its pods' own requests, and with
#: more than five hubs the budget (`LISTINGS_PER_SECOND`) spaces them out anyway.
GROWTH_POLL_SECONDS = 0.25
#: Listings a second for the whole operator, one management request each (on the client the
#: operator keeps for that hub anyway). 20 keep 20 hubs at one a second: more than most
#: operators serve, and a small load beside what the pods ask of Event Hubs themselves.
LISTINGS_PER_SECOND = 20.0
#: Listings in flight at once: a quarter of the Event Hubs calls an operator makes at once
#: (`adapters.hubclients.CONCURRENT_CALLS`), so that unreachable hubs, each waiting out its
#: timeout, never take the cycles' turns.
LISTINGS_AT_ONCE = 8
#: A hub whose listings keep failing rests this long after its first failure, twice as long
#: after each further one in a row...
FAILED_REST_FIRST_SECONDS = 2.0
#: ...up to this: it is listed at most this rarely.
FAILED_REST_MAX_SECONDS = 60.0
#: A listing not done by then (the wait for a turn among the calls in flight, then the call's
#: own timeout) is given up: the hub is listed again at its next turn.
LISTING_LIMIT_SECONDS = 30.0
#: The longest `Watch.stop` waits for the watch and its listings to end.
STOP_SECONDS = 5.0
#: Consumers named in the log line of a growth (a hub may have many).
NAMED_IN_LOG = 3
#: Times this close count as one: a turn 1/20 s after 1.1 s falls a unit in the last place
#: after the clock's 1.15, and its hub would wait a round for nothing.
SAME_TIME_SECONDS = 1e-9
#: The watch never waits less than this (a timer may fire a hair before its time; a loop on
#: fake time may not move for less than its resolution): at most 1 ms late, never a busy loop.
SHORTEST_WAIT_SECONDS = 0.001


def _loop_time() -> float:
    """The running loop's clock (time.monotonic, or looptime's fake time in tests)."""
    return asyncio.get_running_loop().time()


def grown(listed: Sequence[str], cached: Mapping[str, Sequence[str]]) -> list[str]:
    """The consumers whose cached list is shorter than ``listed``. Partition counts only grow:
    a listing no longer than a consumer's list (a stale answer, a hub made anew smaller)
    changes nothing for it; the cycle's own refresh deals with a hub made anew."""
    return [consumer for consumer, ids in cached.items() if len(listed) > len(ids)]


def consumer_key(cached: str) -> ports.Key:
    """(namespace, name) of the consumer whose list the partition cache keeps under
    ``cached``: `observing.hub_key`'s "namespace/name" (a namespace has no "/")."""
    namespace, _, name = cached.partition("/")
    return namespace, name


class Polls:
    """Which hub to list next, and when. Pure but for the clock, which is injected.

    The oldest hub goes first, once it was last listed ``every`` seconds ago or more. One
    listing starts every 1/``per_second`` seconds at most: a token bucket that holds one token,
    so that no second ever sees more than ``per_second`` listings (`backlogs.Budget` does not
    fit: its ten seconds of burst would let 200 listings go at once after a quiet spell). With
    more hubs than ``per_second * every``, each hub is listed every ``hubs / per_second``
    seconds (1,000 hubs at 20 a second: every 50 s)."""

    def __init__(
        self,
        *,
        per_second: float = LISTINGS_PER_SECOND,
        every: float = GROWTH_POLL_SECONDS,
        clock: Callable[[], float] = _loop_time,
    ) -> None:
        if per_second <= 0 or every <= 0:
            raise ValueError("the budget and the period of the listings must be positive")
        self.per_second = per_second
        self.every = every
        self.clock = clock
        #: when each hub was last listed (or first seen), oldest first
        self._last: dict[Hashable, float] = {}
        #: the hubs whose listing has not ended
        self._listing: set[Hashable] = set()
        #: the hubs whose last listings failed: how many in a row, and until when they rest
        self._failed: dict[Hashable, tuple[int, float]] = {}
        #: when the next listing may start
        self._turn = -math.inf
        #: listings started, for the tests
        self.started = 0

    def __len__(self) -> int:
        return len(self._last)

    def sync(self, hubs: Collection[Hashable]) -> None:
        """The hubs the partition cache holds now. A new one waits ``every`` (a cycle has just
        listed it); a gone one (its consumers forgotten) is dropped."""
        now = self.clock()
        present = set(hubs)
        for hub in [hub for hub in self._last if hub not in present]:
            del self._last[hub]
            self._failed.pop(hub, None)
        for hub in hubs:
            self._last.setdefault(hub, now)

    def take(self) -> Hashable | None:
        """The hub to list now, charged to the budget; None: the budget's next turn has not
        come, or no hub is due. A hub whose last listing has not ended, or that rests after
        failed listings, skips its turn."""
        now = self.clock()
        if now + SAME_TIME_SECONDS < self._turn:
            return None
        # Each skip sends a listing or resting hub to the back.
        for _ in range(len(self._listing) + len(self._failed) + 1):
            hub = next(iter(self._last), None)
            if hub is None or now + SAME_TIME_SECONDS < self._last[hub] + self.every:
                return None
            del self._last[hub]
            self._last[hub] = now
            failed = self._failed.get(hub)
            if hub in self._listing or (failed is not None and now + SAME_TIME_SECONDS < failed[1]):
                continue
            self._listing.add(hub)
            self._turn = now + 1.0 / self.per_second
            self.started += 1
            return hub
        return None

    def done(self, hub: Hashable, *, failed: bool = False) -> None:
        """``hub``'s listing ended; after a failure it rests (`FAILED_REST_MAX_SECONDS`)."""
        self._listing.discard(hub)
        if not failed:
            self._failed.pop(hub, None)
            return
        if hub not in self._last:
            return  # forgotten meanwhile
        count = self._failed.get(hub, (0, 0.0))[0] + 1
        rest = min(FAILED_REST_MAX_SECONDS, FAILED_REST_FIRST_SECONDS * 2 ** (count - 1))
        self._failed[hub] = (count, self.clock() + rest)

    def wait(self) -> float:
        """Seconds until `take` may give a hub: the budget's next turn or the oldest hub's,
        whichever is later; at most ``every``."""
        now = self.clock()
        oldest = next(iter(self._last.values()), None)
        due = now + self.every if oldest is None else oldest + self.every
        return min(self.every, max(0.0, self._turn - now, due - now))


class Watch:
    """One operator's growth watch: `Polls` says which hub to list, this lists it, hands a
    longer list to the cache and wakes the consumers that got it. It starts and stops with the
    operator (`running.serve`)."""

    def __init__(
        self,
        hubs: ports.HubPort,
        *,
        wake: Callable[[ports.Key], None],
        polls: Polls | None = None,
        at_once: int = LISTINGS_AT_ONCE,
    ) -> None:
        self.hubs = hubs
        self.wake = wake
        self.polls = polls if polls is not None else Polls()
        self.at_once = max(1, at_once)
        #: consumers woken for a growth, for the tests
        self.woken = 0
        self._task: asyncio.Task[None] | None = None
        self._listings: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ehb-growth-watch")
            self._task.add_done_callback(self._ended)

    async def stop(self, *, limit_seconds: float = STOP_SECONDS) -> None:
        """End the watch and the listings in flight, waiting ``limit_seconds`` at most."""
        task, self._task = self._task, None
        if task is None:
            return
        tasks = {task, *self._listings}
        for each in tasks:
            each.cancel()
        _, pending = await asyncio.wait(tasks, timeout=limit_seconds)
        if pending:
            logger.warning("the growth watch did not stop within %.0f s", limit_seconds)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._listings.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("the growth watch failed", exc_info=task.exception())

    async def _run(self) -> None:
        polls = self.polls
        looked_at = -math.inf
        while True:
            # One round: a look at the hubs once a period, one listing at most, one wait.
            now = polls.clock()
            if now - looked_at >= polls.every:
                polls.sync(self.hubs.hubs())
                looked_at = now
            full = len(self._listings) >= self.at_once
            hub = None if full else polls.take()
            if hub is not None:
                listing = asyncio.create_task(self._list(hub), name="ehb-growth-listing")
                self._listings.add(listing)
                listing.add_done_callback(self._ended)
                continue
            wait = max(
                SHORTEST_WAIT_SECONDS,
                min(polls.every if full else polls.wait(), looked_at + polls.every - now),
            )
            if full:
                await asyncio.wait(
                    set(self._listings), timeout=wait, return_when=asyncio.FIRST_COMPLETED
                )
            else:
                await asyncio.sleep(wait)

    async def _list(self, hub: Hashable) -> None:
        failed = True
        try:
            async with asyncio.timeout(LISTING_LIMIT_SECONDS):
                listed = await self.hubs.list_hub(hub)
            failed = False
        except (errors.EventHubBalancerError, TimeoutError) as e:
            # The cycle's own read reports faults, with its backoff; this hub rests.
            logger.debug(
                "growth watch: a listing failed; the hub rests before its next: %s",
                e or f"no answer within {LISTING_LIMIT_SECONDS:g} s",
            )
            return
        finally:
            self.polls.done(hub, failed=failed)
        if listed is None:
            return  # its consumers were forgotten meanwhile
        woken = [
            consumer
            for consumer in grown(listed, self.hubs.consumers(hub))
            if self.hubs.grow(consumer, hub, listed)
        ]
        if not woken:
            return
        named = ", ".join(woken[:NAMED_IN_LOG]) + (", ..." if len(woken) > NAMED_IN_LOG else "")
        logger.info(
            "an Event Hub grew to %d partitions: %d consumer(s) give them out now (%s)",
            len(listed),
            len(woken),
            named,
        )
        for consumer in woken:
            self.woken += 1
            self.wake(consumer_key(consumer))
