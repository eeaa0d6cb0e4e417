"""What the pod tells the operator: its acknowledgement, and the partitions in trouble.

The runtime writes three things back to its assignment source (the pod's ConfigMap): the
generation it applied, the partitions it released, and reports of the partitions that are
not processing normally (``contracts.partitionreports``). `Acknowledgements` writes them only
when they changed, and a change of the reports alone at most once per ``min_interval``: a
partition that flips between failing and retrying must not turn into a stream of writes.
A write that fails is tried again after a pause that doubles per failure in a row (`RETRY_S`
up to `RETRY_MAX_S`), and said in the log once per `FAILURE_LOG_EVERY_S`: a Role without
``patch``, an API server that throttles writes (429) or is away would otherwise get one
request and one warning per turn of the runtime's loop, from every pod, for as long as it
lasts. A new generation or release is tried at once all the same: it may be the last
(SIGTERM).
`collect_reports` says which partitions to report, from what the runtime knows of them, and
`taken_up` whether a generation's partitions are all running or reported (`untaken`: which
are not).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from typing import Final, Protocol

from eventhub_balancer import errors, handoffs
from eventhub_balancer.adapters import podreconnects
from eventhub_balancer.balancing import partitionlists
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import partitionreports

logger = logging.getLogger(__name__)

Reports = dict[str, partitionreports.PartitionReport]

#: After a failed write, the pause before the same acknowledgement is tried again; doubled
#: per failure in a row, up to `RETRY_MAX_S`: a blip costs one turn of the loop, a standing
#: refusal one request per pod per 5 s instead of two per second.
RETRY_S: Final = 0.5
#: The longest pause: once the API takes writes again, the acknowledgement lands within it.
RETRY_MAX_S: Final = 5.0
#: While writes fail, one warning per this long (with the count), as the watch's outage log.
FAILURE_LOG_EVERY_S: Final = 60.0


class Acknowledgements:
    """The last acknowledgement written, and writing the next one when it differs."""

    def __init__(self, source: assignments.AssignmentSource, *, min_interval: float) -> None:
        self.source = source
        self.min_interval = min_interval
        self._acked: tuple[int | None, dict[str, int], Reports] | None = None
        self._acked_at: float | None = None
        #: Failed writes in a row, since when, the hand-off part (generation, released) of
        #: the last one tried, when to try it again, and when the failures were last logged.
        self._failures = 0
        self._failing_since = 0.0
        self._tried: tuple[int | None, dict[str, int]] | None = None
        self._retry_at = 0.0
        self._logged_at: float | None = None

    async def write(
        self,
        *,
        applied_generation: int | None,
        released: Mapping[str, int],
        reports: Mapping[str, partitionreports.PartitionReport],
    ) -> None:
        """Write unless nothing changed, or only the reports did within ``min_interval``
        (then the next call writes them); a failed write is tried again by a later call once
        its pause has passed, or at once if the generation or the releases changed."""
        state = (applied_generation, dict(released), dict(reports))
        lost = state == self._acked and self.source.acknowledgement_lost()
        if state == self._acked and not lost:
            return
        now = asyncio.get_running_loop().time()
        if (
            self._acked is not None
            and state[:2] == self._acked[:2]
            and self._acked_at is not None
            and now - self._acked_at < self.min_interval
        ):
            return
        if self._failures and now < self._retry_at and self._tried == state[:2]:
            return
        if lost and not self._failures:
            logger.warning(
                "the acknowledgement written last is no longer on the assignment ConfigMap "
                "(removed or edited by someone else): writing generation %s, released %s again",
                state[0],
                released_text(state[1]),
            )
        try:
            sent = await self.source.acknowledge(
                applied_generation=state[0], released=state[1], reports=state[2]
            )
        except errors.EventHubBalancerError as e:
            self._failed(state[:2], e, now=now)
            return
        if not sent:
            return  # nowhere to send it (no ConfigMap of this pod's yet): a later call does
        if self._failures:
            logger.info(
                "acknowledgement written after %d failed attempt(s) over %.0f s",
                self._failures,
                now - self._failing_since,
            )
            self._failures, self._logged_at = 0, None
        if self._acked is None or state[:2] != self._acked[:2]:
            # The annotation keeps every release; the line says those new since the last one.
            told = self._acked[1] if self._acked is not None else {}
            new = {p: epoch for p, epoch in state[1].items() if told.get(p) != epoch}
            said = f", released {released_text(new)}" if new or not told else ""
            logger.info("acknowledged generation %s%s", state[0], said)
        before = self._acked[2] if self._acked is not None else {}
        if state[2] != before or self._acked is None:
            # A count of attempts that rose is news to the operator, not to a person: a
            # partition failing for an hour rewrote the line at each restart, twice or more.
            news = _states(state[2]) != _states(before)
            logger.log(
                logging.INFO if news else logging.DEBUG,
                "reported partitions: %s",
                reports_text(state[2]),
            )
        self._acked, self._acked_at = state, now

    def _failed(
        self, tried: tuple[int | None, dict[str, int]], error: Exception, *, now: float
    ) -> None:
        if not self._failures:
            self._failing_since = now
        self._failures += 1
        self._tried = tried
        pause = podreconnects.backoff(self._failures, first=RETRY_S, most=RETRY_MAX_S)
        self._retry_at = now + pause
        first = self._logged_at is None or now - self._logged_at >= FAILURE_LOG_EVERY_S
        if first:
            self._logged_at = now
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "acknowledgement not written (%d attempt(s) over %.0f s, the next in %.1f s): %s",
            self._failures,
            now - self._failing_since,
            pause,
            error,
        )


def released_text(released: Mapping[str, int]) -> str:
    """The partitions released, with the epochs they were released at, for a log line."""
    if not released:
        return "nothing"
    return f"{partitionlists.compact(released)} ({partitionlists.epochs(released.values())})"


def _states(reports: Mapping[str, partitionreports.PartitionReport]) -> dict[str, tuple[str, int]]:
    """What a person reads of the reports: each partition's trouble and epoch."""
    return {p: (r.state, r.epoch) for p, r in reports.items() if r.state is not None}


def reports_text(reports: Mapping[str, partitionreports.PartitionReport]) -> str:
    """The partitions reported, by state, for a log line: ``failing 0-3 (epoch 2, up to 3
    attempts); stuck 7 (epoch 1)``, or ``none``."""

    def attempts(ids: list[str]) -> str:
        tried = max(reports[p].attempts for p in ids)
        return f", up to {tried} attempt{'s' if tried > 1 else ''}" if tried else ""

    states = _states(reports)
    return partitionlists.by_state(partitionreports.REPORT_STATES, states, attempts) or "none"


def released_unrun(
    assignment: assignments.Assignment,
    running: Collection[str],
    *,
    failing: Collection[str] = (),
    leaving: bool = False,
) -> dict[str, int]:
    """The releases to acknowledge at once, {partition: epoch}: those of partitions not
    ``running`` (after a restart, or lost, or failed), with nothing to finish. ``leaving``
    (shutting down): the owned ones ``failing`` too (`handoffs.released_at_once`)."""
    return {
        partition: entry.epoch
        for partition, entry in assignment.partitions.items()
        if handoffs.released_at_once(
            entry.state,
            running=partition in running,
            failing=partition in failing,
            leaving=leaving,
        )
    }


class Reporting(Protocol):
    """What `collect_reports` needs of a running partition worker."""

    @property
    def epoch(self) -> int: ...

    @property
    def releasing(self) -> bool: ...

    def report(self, now: float | None = None) -> partitionreports.PartitionReport | None: ...


class Running(Reporting, Protocol):
    """What `taken_up` needs of a partition worker besides its report."""

    @property
    def fenced(self) -> asyncio.Event: ...

    @property
    def state(self) -> handoffs.WorkerState: ...

    @property
    def received(self) -> bool: ...


def taken_up(
    wanted: Mapping[str, int],
    workers: Mapping[str, Running],
    reports: Mapping[str, partitionreports.PartitionReport],
) -> bool:
    """Every wanted partition ({partition: epoch}) runs fenced at its epoch, or is reported
    (parked, failing, stuck, lost)."""
    return not untaken(wanted, workers, reports)


def untaken(
    wanted: Mapping[str, int],
    workers: Mapping[str, Running],
    reports: Mapping[str, partitionreports.PartitionReport],
) -> list[str]:
    """The wanted partitions that are not taken up yet (`taken_up`)."""
    found = []
    for partition, epoch in wanted.items():
        if partition in reports and reports[partition].state is not None:
            continue
        worker = workers.get(partition)
        if (
            worker is None
            or worker.epoch != epoch
            or worker.releasing
            or not worker.fenced.is_set()
        ):
            found.append(partition)
    return found


class Failure(Protocol):
    """A failure that keeps partitions from starting: how often, and the last error."""

    @property
    def failures(self) -> int: ...

    @property
    def error(self) -> str: ...


#: The states of a worker that is not processing its partition yet, or no longer.
UNTAKEN: Final[frozenset[handoffs.WorkerState]] = frozenset({"fencing", "failed"})


def collect_reports(
    *,
    wanted: Mapping[str, int],
    workers: Mapping[str, Running],
    lost: Mapping[str, tuple[int, str]],
    restarts: Mapping[str, Failure],
    unopened: Failure | None,
    now: float,
    credentials: str | None = None,
) -> Reports:
    """The partitions of the assignment (``wanted``: {partition: epoch}) that are not
    processing normally: a worker's own report (failing, parked, stuck), lost at our epoch,
    restarting after a crash, or not started because the clients cannot open (``unopened``).
    A worker started again after a failure keeps its partition's failure reported until it
    is fenced and a receive answered (and while it ends failed again, before the runtime drops
    it): in an outage of the store or the hub each new attempt fails again after its budget,
    and a report that went away at every attempt made the operator post `PartitionRecovered`
    and `PartitionFailing` in turn, and flap `Ready`, while nothing ran. A disabled hub
    refuses only once the worker is fenced, as it receives.
    ``credentials``: what to fix in a credential file whose new content the pod refused; the
    partitions that fail to start say it first (their credentials may be the old ones)."""
    found: Reports = {}
    for partition, worker in workers.items():
        if wanted.get(partition) == worker.epoch and not worker.releasing:
            report = worker.report(now)
            restart = restarts.get(partition)
            if (
                (report is None or report.state is None)
                and restart is not None
                and not _standing(worker)
            ):
                aside = report.set_aside if report is not None else None
                report = _failing(partition, worker.epoch, restart, credentials, aside)
            if report is not None:
                found[partition] = report
    for partition, (epoch, error) in lost.items():
        if wanted.get(partition) == epoch and partition not in workers:
            found[partition] = partitionreports.PartitionReport(
                partition=partition, epoch=epoch, state="lost", error=error
            )
    for partition, restart in restarts.items():
        if partition in wanted and partition not in workers:
            found[partition] = _failing(partition, wanted[partition], restart, credentials)
    if unopened is not None:
        for partition, epoch in wanted.items():
            if partition not in workers and partition not in found:
                found[partition] = _failing(partition, epoch, unopened, credentials)
    return found


def _standing(worker: Running) -> bool:
    """Fenced, and a receive answered: the link stands, so a past failure is over."""
    return worker.state not in UNTAKEN and worker.received


def _failing(
    partition: str,
    epoch: int,
    failure: Failure,
    credentials: str | None,
    aside: partitionreports.SetAside | None = None,
) -> partitionreports.PartitionReport:
    error = partitionreports.first_line(failure.error)
    if credentials is not None:
        error = f"{partitionreports.first_line(credentials)} (last failure: {error})"
    return partitionreports.PartitionReport(
        partition=partition,
        epoch=epoch,
        state="failing",
        attempts=failure.failures,
        error=partitionreports.first_line(error),
        set_aside=aside,
        restarting=True,
    )
