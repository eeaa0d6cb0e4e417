"""Spark mode's SparkSession over the pod's life: started and warmed, replaced when lost.

A pod is Ready, and so given partitions, only once its session is warm. A session takes
seconds to start (10-12 s measured on a loaded two-core machine) and its first triggers run
5-10 times slower until the JVM has compiled their path; a pod that turned Ready before that
would take partitions over from a running owner and leave them idle meanwhile. So the
build (`spark.sessions.build_session`, then `spark.frames.warm_up`: a few tiny jobs) runs
first, and the pod reports NotReady (`SessionKeeper.ready`) until it has returned.

A session can be lost later: its JVM killed (out of memory), a cluster's driver or a Spark
Connect server gone. A trigger that fails asks `SessionKeeper.lost` whether the session
still answers; if it does not, the keeper starts a new one, the pod goes NotReady while it
starts, and the trigger's batches wait for it (they count no failed attempt the first time:
a JVM can die of something else; `triggers` counts a second loss with the same batch).
The operator keeps a NotReady pod's partitions for ``podGraceSeconds``, so a session back
within the grace period costs no move; a longer one moves them, by the ordinary hand-off.
A session that cannot start, first or again, ends the pod (`on_failed`).

A session can also stop processing without any call failing: a standalone master restarted
(the new one kills the application's executors and does not know the application), a cluster
with no executor left. Its trigger's job then waits for good, and a trigger that never fails
was never followed by a check: the pod stayed Ready, its partitions stuck. So the keeper also
asks a warm session every `WATCH_S` whether it still answers (`spark.sessions.is_alive` counts
a cluster session without executors as lost), and replaces it after `WATCH_STRIKES` noes in a
row: letting it go (its stop) fails the hung trigger, whose batches wait for the new session.

The liveness check and the disposal are calls into a session that may hang rather than die
(a JVM in a garbage-collection spiral, a Connect server that accepts and never answers), and
the trigger loop waits for them: each is bounded (`ALIVE_TIMEOUT_S`, `DISCARD_TIMEOUT_S`).
A session that does not answer in time is lost. A disposal that does not end in time ends
the pod (`on_failed`), as a session that cannot start does: its thread goes on, and when
pyspark's ``stop()`` returns at last it resets the process-wide state (the active context and
session) that a new session in the same process would be using; a new process starts clean.

Nothing here imports pyspark: the build, the liveness check and the disposal of a lost
session are given (`consumer.launching` wires `spark.sessions`'), so the keeper runs on fakes
and fake time in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from eventhub_balancer.contracts import partitionreports

logger = logging.getLogger(__name__)

#: The longest wait for a session's answer to the liveness check (a live one answers in
#: milliseconds: one py4j call, or one Connect round trip); past it the session is lost.
ALIVE_TIMEOUT_S = 5.0
#: The longest wait for a lost session to be let go before the new one starts.
DISCARD_TIMEOUT_S = 10.0
#: How often a warm session is asked whether it still answers, during triggers and between.
WATCH_S = 10.0
#: Noes (or no answer within `ALIVE_TIMEOUT_S`) in a row that make a watched session lost:
#: a cluster relaunching a lost executor has none for a few seconds.
WATCH_STRIKES = 3


class SessionKeeper:
    """The pod's one session: `get` waits for the current one, `ready` says whether it is
    warm, `lost` replaces it when it no longer answers."""

    def __init__(
        self,
        build: Callable[[], Awaitable[Any]],
        *,
        alive: Callable[[Any], Awaitable[bool]],
        discard: Callable[[Any], Awaitable[None]],
        on_failed: Callable[[BaseException], None] = lambda _: None,
    ) -> None:
        """``build`` starts and warms a session; ``alive`` asks a session whether it still
        answers; ``discard`` lets go of a lost one; ``on_failed`` hears a build that failed."""
        self.build = build
        self.alive = alive
        self.discard = discard
        self.on_failed = on_failed
        self.task: asyncio.Task[Any] | None = None
        #: Asks the current warm session every `WATCH_S` whether it still answers.
        self._watcher: asyncio.Task[None] | None = None
        #: Sessions started after one was lost.
        self.restarts = 0
        self._since = 0.0

    def start(self) -> asyncio.Task[Any]:
        """The current session's build, begun now if none is."""
        if self.task is None:
            self._since = asyncio.get_running_loop().time()
            self.task = asyncio.create_task(self._build(), name="spark-session")
        return self.task

    async def _build(self, lost: Any = None) -> Any:
        """A new session: ``lost`` (the session it replaces) let go first, within its bound."""
        if lost is not None:
            await self._discard(lost)
        try:
            session = await self.build()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.error("the SparkSession did not start: %s", e)
            self.on_failed(e)
            raise
        took = asyncio.get_running_loop().time() - self._since
        logger.info("the SparkSession is ready, started and warmed in %.1f s", took)
        task = asyncio.current_task()
        self._watcher = asyncio.create_task(self._watch(task, session), name="spark-session-watch")
        return session

    async def _discard(self, session: Any) -> None:
        try:
            async with asyncio.timeout(DISCARD_TIMEOUT_S):
                await self.discard(session)
        except TimeoutError:
            error = RuntimeError(
                f"the lost SparkSession was not let go within {DISCARD_TIMEOUT_S:g} s"
            )
            logger.error("%s: the pod stops, to start again in a clean process", error)
            self.on_failed(error)
            raise error from None
        except Exception as e:  # it is gone either way
            logger.debug("letting go of the lost SparkSession failed: %r", e)

    async def _watch(self, task: asyncio.Task[Any] | None, session: Any) -> None:
        """Ask ``session`` (built by ``task``) every `WATCH_S` whether it still answers; replace
        it after `WATCH_STRIKES` noes in a row. Ends once it is no longer the current one."""
        strikes = 0
        while True:
            await asyncio.sleep(WATCH_S)
            if self.task is not task:
                return
            answered = await self._answers(session)
            if self.task is not task:
                return
            strikes = 0 if answered else strikes + 1
            if strikes >= WATCH_STRIKES:
                self._replace(
                    session,
                    f"its liveness check said no {strikes} times in a row, {WATCH_S:g} s apart",
                )
                return

    async def _answers(self, session: Any) -> bool:
        """The liveness check, bounded: no answer within `ALIVE_TIMEOUT_S` is a no."""
        try:
            async with asyncio.timeout(ALIVE_TIMEOUT_S):
                return await self.alive(session)
        except TimeoutError:
            logger.warning(
                "the SparkSession did not answer its liveness check within %g s", ALIVE_TIMEOUT_S
            )
        except Exception as e:  # a check that fails is an answer too
            logger.debug("the SparkSession's liveness check failed: %r", e)
        return False

    def _replace(self, session: Any, why: str) -> None:
        """Let go of the lost ``session`` and start a new one (NotReady meanwhile)."""
        self.restarts += 1
        logger.warning(
            "the SparkSession was lost (%s); starting a new one, NotReady until it is warm", why
        )
        self._since = asyncio.get_running_loop().time()
        self.task = asyncio.create_task(self._build(lost=session), name="spark-session")

    async def get(self) -> Any:
        """The session once it is warm; raises why it could not start."""
        return await asyncio.shield(self.start())

    def ready(self) -> tuple[bool, str]:
        """Whether the session is warm, and why not (the pod's readiness says it)."""
        task = self.task
        if task is None or not task.done():
            took = asyncio.get_running_loop().time() - self._since if task is not None else 0.0
            doing = "starting again after it was lost" if self.restarts else "starting"
            return False, f"SparkSession {doing} ({took:.1f} s)"
        if task.cancelled():
            return False, "SparkSession start cancelled"
        error = task.exception()
        if error is not None:
            return False, f"SparkSession did not start: {error}"
        return True, "SparkSession warm"

    async def lost(self, session: Any, error: BaseException) -> bool:
        """Whether a trigger on ``session`` failed because the session is gone (``error`` is
        what the trigger raised); if so, a new session is starting when this returns."""
        task = self.task
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return True  # being replaced already: the trigger goes to the new one
        if task.result() is not session:
            return True  # replaced already, by another trigger's report
        if await self._answers(session):
            return False
        if self.task is not task:
            return True  # replaced meanwhile, by the watch
        self._replace(session, _told(error))
        return True

    async def stop(self, stop_session: Callable[[Any], Awaitable[None]]) -> None:
        """Stop the session once it has started (a start in flight is waited for)."""
        if self._watcher is not None:
            self._watcher.cancel()
        if self.task is None:
            return
        with contextlib.suppress(Exception):
            session = await self.task
            await stop_session(session)


def _told(error: BaseException) -> str:
    """``error`` in one line, as a partition's report says it (`partitionreports.first_line`:
    a Spark Connect server gone is ``SparkConnectGrpcException: ...: Connection refused
    (UNAVAILABLE)``, not grpcio's five lines); its type alone when its text cannot be had
    (py4j asks the JVM for a Java exception's text, and the JVM is what was lost)."""
    try:
        return partitionreports.first_line(f"{type(error).__name__}: {error}")
    except Exception:
        return type(error).__name__
