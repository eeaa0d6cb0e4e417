"""Kubernetes Events posted beside the cycles, not inside them.

An Event is for a person reading ``kubectl describe``: nobody waits on it. Posted inside a
cycle, the Events of its moves (one per group of moves: two to six in a hand-off's cycle, as
many requests as its ConfigMaps) took turns with its ConfigMap writes at an API server that
answers one request after another, and the next cycle, the hand-off's second half, waited for
them. A cycle hands them to a `Poster` once its record holds the moves (`writing.apply`) and
goes on; the poster posts them one at a time, in the order handed, so that they never take more
than one turn of the server from a cycle.

The queue is bounded: at most `MAX_QUEUED` Events wait, and the ones handed beyond that are
dropped, counted and logged once per burst: when the burst begins, and with how many were
dropped once the queue is posted. When the operator stops, what is queued is posted
within `STOP_SECONDS`. The Events waiting about an EventHubConsumer that was deleted are
dropped (`Poster.withdraw`). An Event lost to a crash is what a failed post always was: lost, and
logged where it could be.

An API server that refuses Events for a while (an EventRateLimit admission answers 429 once a
namespace posts too many, API Priority and Fairness throttles, an overloaded one answers 503)
refuses each one: that was a WARNING an Event, 40 lines for a rollout's 40 moves. The first
refusal is said, the ones after it counted (at DEBUG), a refusal that lasts is reminded of at
most every `cyclefaults.REMIND_SECONDS`, and the first Event posted again says how many were
refused (`Refusals`). An Event refused because its namespace is being deleted is no refusal
to tell of: it is said at DEBUG alone.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.handlers import cyclefaults, ports

logger = logging.getLogger(__name__)

#: The Events that may wait to be posted; a thousand consumers' hand-offs at once fit.
MAX_QUEUED = 1000
#: How long a stopping operator keeps posting what is queued, from the moment it began
#: stopping (`Poster.stopping`): the daemons' cycles in flight take up to 6 s of the same time
#: (`kopfwiring.CYCLE_FINISH_SECONDS`), and the Events go on posting meanwhile.
STOP_SECONDS = 5.0


class Poster:
    """The operator's Events, posted one at a time in the order handed (`post`)."""

    def __init__(
        self,
        kube: ports.KubePort,
        *,
        limit: int = MAX_QUEUED,
        posting: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        """``posting`` is told of every Event as it is posted (the operator counts them in its
        metrics: a cycle's own count of its writes leaves out what is posted after it)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._kube = kube
        self._limit = limit
        self._posting = posting
        self._queue: collections.deque[Mapping[str, Any]] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        #: Events dropped because the queue was full, since the start
        self.dropped = 0
        #: the dropped of the burst under way (the queue full since it last emptied)
        self._burst = 0
        self._in_flight = False
        #: the run of refused Events under way, said once (`Refusals`)
        self._refusals = Refusals()
        #: when the Events still queued are given up on, once the operator began stopping
        #: (`stopping`)
        self._deadline: asyncio.TimerHandle | None = None
        self._given_up = False

    @property
    def pending(self) -> int:
        """The Events handed and not posted yet (the one being posted included)."""
        return len(self._queue) + (1 if self._in_flight else 0)

    def post(self, body: Mapping[str, Any]) -> None:
        """Hand one Event over; it is posted after those handed before it. Never waits."""
        if self._given_up:  # the operator stopped posting (`stopping`)
            logger.debug("stopping: not posting Event %s", body.get("reason"))
            return
        if len(self._queue) >= self._limit:
            self.dropped += 1
            self._burst += 1
            if self._burst == 1:
                logger.warning(
                    "%d Kubernetes Events wait to be posted: dropping %s and the ones after it "
                    "until the API server takes them again",
                    len(self._queue),
                    body.get("reason"),
                )
            return
        self._queue.append(body)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ehb-event-posts")

    def withdraw(self, uid: str) -> int:
        """Drop the Events waiting about the object ``uid`` (an EventHubConsumer deleted:
        nobody can describe it any more); the one being posted goes out. How many."""
        waiting = len(self._queue)
        self._queue = collections.deque(
            body for body in self._queue if (body.get("involvedObject") or {}).get("uid") != uid
        )
        return waiting - len(self._queue)

    async def _run(self) -> None:
        while self._queue:
            body = self._queue.popleft()
            self._in_flight = True
            try:
                if self._posting is not None:
                    self._posting(body)
                await self._kube.create_event(namespace=body["metadata"]["namespace"], body=body)
                self._refusals.ended(now=_now())
            except errors.NamespaceTerminating as e:
                # `kubectl delete namespace`: the Event's object goes with it, nothing to fix.
                logger.debug("not posting Event %s: %s", body.get("reason"), e)
            except (errors.TransientError, errors.ConfigurationError) as e:
                self._refusals.refused(body, e, now=_now())
            except Exception as e:  # an Event must never stop the ones after it
                logger.warning("could not post Event %s: %s", body.get("reason"), e)
            finally:
                self._in_flight = False
        if self._burst:
            logger.warning(
                "the Kubernetes Events that waited are posted; dropped meanwhile: %d",
                self._burst,
            )
        self._burst = 0

    async def flushed(self, *, limit_seconds: float) -> bool:
        """Wait until every Event handed was posted (or failed), at most ``limit_seconds``;
        whether it was."""
        task = self._task
        if task is None or task.done():
            return True
        done, _ = await asyncio.wait({task}, timeout=limit_seconds)
        return bool(done)

    def stopping(self, *, now: float, limit_seconds: float = STOP_SECONDS) -> None:
        """The operator began stopping at ``now`` (the loop's time): what is queued is posted
        until ``limit_seconds`` after, and then given up on, by the poster itself. kopf, once
        its own tasks have ended, waits 5 s for the others before it cancels them: with an
        Event in flight to an API server that hung, that wait came after the daemons' 6 s.
        The first call counts."""
        if self._deadline is not None:
            return
        self._deadline = asyncio.get_running_loop().call_at(
            now + limit_seconds, self._give_up, limit_seconds
        )

    async def stop(self, *, limit_seconds: float = STOP_SECONDS) -> None:
        """Post what is queued within ``limit_seconds`` of the stop (`stopping`, or now),
        then give up on the rest."""
        self.stopping(now=_now(), limit_seconds=limit_seconds)
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})  # it ends by itself, or at the deadline (`_give_up`)
        if self._deadline is not None:
            self._deadline.cancel()

    def _give_up(self, limit_seconds: float) -> None:
        self._given_up = True
        left = self.pending
        task, self._task = self._task, None
        self._queue.clear()
        if task is not None:
            task.cancel()
        if left:
            logger.warning(
                "stopping: %d Kubernetes Events were not posted within %g s of the stop",
                left,
                limit_seconds,
            )


def _now() -> float:
    return asyncio.get_running_loop().time()


class Refusals:
    """A run of Events the API server refuses, as the poster meets it: said when it starts
    (and when its reason changes), reminded of at most every `cyclefaults.REMIND_SECONDS`,
    and its end said with how many were refused."""

    def __init__(self) -> None:
        self._run = cyclefaults.FaultRun()

    def refused(
        self, body: Mapping[str, Any], error: errors.EventHubBalancerError, *, now: float
    ) -> None:
        run = self._run
        said = run.failed(error.reason, now=now)
        if said == "new":
            logger.warning(
                "could not post Event %s: %s; the Events refused after it are counted, not "
                "logged, until one is posted",
                body.get("reason"),
                error,
            )
        elif said == "lasting":
            logger.warning(
                "Kubernetes Events still refused: %d over %.0f s (%s)",
                run.failures,
                now - run.since,
                error,
            )
        else:
            logger.debug("could not post Event %s: %s", body.get("reason"), error)

    def ended(self, *, now: float) -> None:
        run = self._run
        reason = run.ended()
        if reason is not None:
            logger.info(
                "Kubernetes Events are posted again; %d refused over %.0f s (last: %s)",
                run.failures,
                now - run.since,
                reason,
            )
