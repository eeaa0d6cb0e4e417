"""The partitions whose worker failed, each waiting out its backoff before it starts again,
and the one log line for a failure that every partition shares.

A failed worker starts again after `backoff_delay` (1 s, doubled per failure in a row,
up to 30 s). A failure after the worker ran for `STREAK_S` (10 minutes) since its restart
starts a new row: the partition then starts again after 1 s and is reported at attempt 1, not
after 30 s because of failures long past (the kubelet's rule for a container's crash-loop
backoff). Most failures belong to their partition. A hub or consumer group that does not
exist (`errors.EventHubNotFound`), or a checkpoint container that does not (deleted under the
pod: `errors.CheckpointContainerNotFound`), belongs to all of them: every partition fails with
it within a second, and logged per partition it made a 32-partition pod write 32 ERROR lines
every round.
Such a failure is logged here once, when it first appears and again every `REPEAT_SECONDS`
while it stands, with how many partitions wait on it; the lines per partition go to DEBUG.

Every other failure is logged here too, one line with when the partition starts again. A
failure on Event Hubs (`errors.EventHubUnreachable`: refused, unanswered, throttled, a
partition or position refused) may be one partition's trouble or the whole pod's; while
several partitions meet one together it is said in one line for them (`adapters.sharedlines`).
So is a checkpoint store that refuses the pod (`errors.CheckpointStoreRefused`: its credentials
rejected, or forbidden a write) or does not answer it within a call's budget
(`errors.CheckpointStoreUnreachable`: time-outs, 503s, connections refused), whose restart
records the cause alone, without the partition's blob and sequence number, so that every
partition reports it in the same words.
The restart of a failure said for many partitions says its take-up at DEBUG too: it is one
more attempt in the outage, not news.
"""

from __future__ import annotations

import dataclasses
import logging

from eventhub_balancer import errors
from eventhub_balancer.adapters import sharedlines
from eventhub_balancer.consumer import loopclocks

logger = logging.getLogger(__name__)

#: A failed worker or clients that cannot be opened are tried again after this delay,
#: doubled on every failure in a row, up to the cap.
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0


#: A worker that ran this long after its restart before it failed again ends a row of failures.
STREAK_S = 600.0


def backoff_delay(failures: int) -> float:
    """The pause after ``failures`` failures in a row (1 or more)."""
    return float(min(RESTART_BACKOFF_S * 2.0 ** (failures - 1), RESTART_BACKOFF_MAX_S))


#: How often a failure shared by every partition is logged again while it stands: the pace of
#: every line said for many partitions (`sharedlines.REPEAT_S`, 300 s).
REPEAT_SECONDS = sharedlines.REPEAT_S

#: A partition's failure, with its restart.
FAILED = "partition %s: epoch %d failed: %s; restarting in %.1f s"
#: A failure of a read made with the Event Hubs key replaced since (not counted).
STALE = (
    "partition %s: epoch %d failed on the connection string it started with, replaced since "
    "(%s): starting again at once"
)
#: The failures of partitions that fail on Event Hubs together (`sharedlines`): unreachable,
#: throttled, a receive position or partition refused.
UNREACHABLE = "%d partitions failed on Event Hubs together, each restarting with backoff, last: %s"
#: The failures of partitions that the checkpoint store refuses together (`sharedlines`): its
#: credentials rejected, or forbidden what it must do (a rotated key, an expired SAS, a role).
REFUSED = (
    "%d partitions refused by the checkpoint store together, each restarting with backoff, last: %s"
)
#: The failures of partitions that cannot reach the checkpoint store together (`sharedlines`):
#: a call's budget spent on time-outs, 503s or refused connections.
UNANSWERED = (
    "%d partitions failed on the checkpoint store together, each restarting with backoff, last: %s"
)


def shared(error: BaseException | None) -> bool:
    """Whether ``error`` is a failure of what every partition reads, not of one partition."""
    return isinstance(error, errors.EventHubNotFound | errors.CheckpointContainerNotFound)


@dataclasses.dataclass
class Restart:
    """A failed partition: how often in a row, when it may start again, the last error."""

    failures: int
    not_before: float
    error: str = ""
    #: Its failure was said for many partitions, not for it alone (its take-up is quiet too).
    quiet: bool = False

    def long_past(self, now: float) -> bool:
        """Its restart was `STREAK_S` ago or more: what it says of the partition is over."""
        return now - self.not_before >= STREAK_S


class Restarts:
    """The failed partitions of one pod's current coordinates, by partition id."""

    def __init__(self) -> None:
        #: Bounded by the hub's partition count, as the runtime's other maps are.
        self.entries: dict[str, Restart] = {}
        #: Each shared failure's text, and when it was last logged.
        self._said: dict[str, float] = {}
        self._unreachable = sharedlines.SharedLines(logger, UNREACHABLE)
        self._refused = sharedlines.SharedLines(logger, REFUSED)
        self._unanswered = sharedlines.SharedLines(logger, UNANSWERED)

    def failed(
        self,
        partition: str,
        error: BaseException | None,
        *,
        epoch: int,
        now: float | None = None,
        stale: bool = False,
    ) -> Restart | None:
        """Record a failure of ``partition``'s worker at ``epoch`` (``error`` None: it
        crashed, and its traceback is logged already) at loop time ``now`` (None: the loop's
        clock now); its restart waits the backoff.

        A ``stale`` failure came from a read made with an Event Hubs key replaced since (in
        flight across the swap, before the worker could open its link with the new one): it
        says nothing of the new key, so it is not recorded (None) and the partition starts
        again at once."""
        if stale:
            logger.info(STALE, partition, epoch, error or "the worker crashed")
            return None
        now = loopclocks.now() if now is None else now
        previous = self.entries.get(partition)
        if previous is not None and previous.long_past(now):
            previous = None  # it ran long enough since its restart: a new row of failures
        failures = (previous.failures if previous else 0) + 1
        delay = backoff_delay(failures)
        text = str(error) if error is not None else "the worker crashed"
        # A store that refuses the pod, or does not answer it, is reported as every partition
        # meets it: in the same words, which name its cause before the status's bound cuts
        # the line, and which the operator says once for all of them.
        reported = text
        if isinstance(error, errors.CheckpointStoreRefused | errors.CheckpointStoreUnreachable):
            reported = error.cause or text
        restart = self.entries[partition] = Restart(failures, now + delay, reported)
        if error is None:
            logger.info("partition %s: restarting in %.1f s", partition, delay)
            return restart
        lines = self._lines(error)
        if lines is not None:
            restart.quiet = not lines.say(
                partition, logging.ERROR, FAILED, partition, epoch, text, delay, now=now
            )
            return restart
        if not shared(error):
            logger.error(FAILED, partition, epoch, text, delay)
            return restart
        restart.quiet = True
        logger.debug(FAILED, partition, epoch, text, delay)
        said = self._said.get(text)
        if said is None or now - said >= REPEAT_SECONDS:
            self._said = {text: now}  # only the failure that stands now is remembered
            logger.error(
                "%s (every partition waits on it, each tried again with backoff up to %.0f s "
                "apart; said again every %.0f s while it lasts)",
                text,
                RESTART_BACKOFF_MAX_S,
                REPEAT_SECONDS,
            )
        return restart

    def _lines(self, error: BaseException) -> sharedlines.SharedLines | None:
        """The lines of the failures several partitions meet together, for ``error``'s kind."""
        if isinstance(error, errors.EventHubUnreachable):
            return self._unreachable
        if isinstance(error, errors.CheckpointStoreRefused):
            return self._refused
        if isinstance(error, errors.CheckpointStoreUnreachable):
            return self._unanswered
        return None

    def due(self, partition: str, *, now: float) -> bool:
        """Whether ``partition`` may start (it never failed, or its backoff is over)."""
        restart = self.entries.get(partition)
        return restart is None or now >= restart.not_before

    def take_up_level(self, partition: str, *, now: float) -> int:
        """The level of ``partition``'s take-up line: DEBUG for the restart of a failure said
        for many partitions (in an outage each restart's take-up said "processing" at INFO,
        16 lines a round for 16 partitions, while nothing was), INFO otherwise: a first
        take-up, or one long after the failure (the partition given back after `STREAK_S`)."""
        restart = self.entries.get(partition)
        if restart is None or restart.long_past(now):
            return logging.INFO
        return logging.DEBUG if restart.quiet else logging.INFO

    def ended(self, partition: str) -> None:
        """``partition``'s worker ended well (released or lost): its failures are over."""
        self.entries.pop(partition, None)

    def clear(self) -> None:
        """New coordinates: what failed on the old ones says nothing about them."""
        self.entries.clear()
        self._said.clear()
        self._unreachable = sharedlines.SharedLines(logger, UNREACHABLE)
        self._refused = sharedlines.SharedLines(logger, REFUSED)
        self._unanswered = sharedlines.SharedLines(logger, UNANSWERED)
