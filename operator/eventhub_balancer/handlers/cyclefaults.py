"""What the operator's log says of one consumer whose cycles keep failing.

A cycle fails when the API server refuses or loses a write (403 by RBAC, 422 by an admission
policy, a storm of conflicts, 5xx): the daemon (`registering.run_daemon`) retries with
backoff, up to once a minute, for as long as it lasts. The log says the fault once when it
starts (and again when its reason changes), reminds of it at most every `REMIND_SECONDS`
with how many attempts failed since, and says in one line when the cycles succeed again.
The attempts in between are at DEBUG; ``ehb_cycles_total{result}`` counts every one.

The relisting (`cache.relisting`) lists each namespace's pods every 10 s, and its ConfigMaps
every minute, tried again at every turn after a failure. An API server that throttles (429)
or is overloaded (503) refuses them for as long as it lasts, and each refusal was one WARNING
per namespace and kind: six lines a minute for each namespace, among which the cycles' faults
were lost. `ListingFaults` says them as the cycles' are said.
"""

from __future__ import annotations

import logging

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

#: A fault that lasts is reminded of at most this often (a consumer's line), not at each retry.
REMIND_SECONDS = 600.0


def is_transient(reason: str) -> bool:
    """Whether ``reason`` is an outage's (a `errors.TransientError`'s, or one of its kinds'):
    one that may pass by itself, whose words may change at each attempt (the host that
    refused, the attempts made). Any other names what is wrong and what to change."""
    kinds: list[type[errors.EventHubBalancerError]] = [errors.TransientError]
    while kinds:
        kind = kinds.pop()
        if kind.reason == reason:
            return True
        kinds.extend(kind.__subclasses__())
    return False


def to_say(before: str | None, reason: str, *, said: float, now: float) -> str | None:
    """Whether a failure for ``reason`` is to be said, after a run of ``before`` (None: no run
    under way) last said at ``said``: ``"new"`` when a run starts or its reason changes,
    ``"lasting"`` when a reminder is due, else None."""
    if reason != before:
        return "new"
    if now - said >= REMIND_SECONDS:
        return "lasting"
    return None


class FaultRun:
    """A run of failures of one thing, and when the log should say it: when it starts or its
    reason changes, then at most every `REMIND_SECONDS`; ended by the next success. The
    cycles' (`CycleFaults`), the listings' (`ListingFaults`) and the refused Events'
    (`eventposts.Refusals`) runs, each worded by its owner."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.since = 0.0
        self.failures = 0
        self._said = 0.0

    def failed(self, reason: str, *, now: float) -> str | None:
        """One more failure (loop time ``now``): ``"new"`` when it is to be said (the run
        starts, or its reason changes), ``"lasting"`` when a reminder is due, else None."""
        if self.reason is None:
            self.since, self.failures = now, 0
        self.failures += 1
        due = to_say(self.reason, reason, said=self._said, now=now)
        self.reason = reason
        if due is not None:
            self._said = now
        return due

    def ended(self) -> str | None:
        """A success: the reason of the run it ends, if one was under way."""
        reason, self.reason = self.reason, None
        return reason


class CycleFaults:
    """One consumer's run of failed cycles, as the daemon meets them (its alone)."""

    def __init__(self, namespace: str, name: str) -> None:
        self._who = f"{namespace}/{name}"
        self._run = FaultRun()

    def failed(self, error: errors.EventHubBalancerError, *, retry_in: float, now: float) -> None:
        """A cycle failed with ``error``; the next attempt is in ``retry_in`` s (loop time
        ``now``)."""
        run = self._run
        said = run.failed(error.reason, now=now)
        if said == "new":
            logger.warning("%s: cycle failed (%s), retrying in %.1f s", self._who, error, retry_in)
        elif said == "lasting":
            logger.warning(
                "%s: cycles still failing, %d attempts over %.0f s (%s), retrying in %.1f s",
                self._who,
                run.failures,
                now - run.since,
                error,
                retry_in,
            )
        else:
            logger.debug("%s: cycle failed (%s), retrying in %.1f s", self._who, error, retry_in)

    def succeeded(self, *, now: float) -> None:
        """A cycle succeeded: the fault under way, if any, is over."""
        run = self._run
        reason = run.ended()
        if reason is not None:
            logger.info(
                "%s: cycles succeed again after %d failed attempts over %.0f s (last: %s)",
                self._who,
                run.failures,
                now - run.since,
                reason,
            )


class ListingFaults:
    """The listings that are failing now, by what they list (``pods in shop``), as one
    relisting meets them; logged on ``logger``."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._runs: dict[str, FaultRun] = {}

    def failed(self, what: str, error: errors.EventHubBalancerError, *, now: float) -> None:
        """Listing ``what`` failed with ``error`` (loop time ``now``)."""
        run = self._runs.setdefault(what, FaultRun())
        said = run.failed(error.reason, now=now)
        if said == "new":
            self._logger.warning("%s were not listed afresh: %s", what, error)
        elif said == "lasting":
            self._logger.warning(
                "%s still not listed afresh, %d attempts over %.0f s (%s)",
                what,
                run.failures,
                now - run.since,
                error,
            )
        else:
            self._logger.debug("%s were not listed afresh: %s", what, error)

    def succeeded(self, what: str, *, now: float) -> bool:
        """Listing ``what`` succeeded: its fault, if any, is over (then True)."""
        run = self._runs.pop(what, None)
        reason = run.ended() if run is not None else None
        if run is not None and reason is not None:
            self._logger.info(
                "%s listed afresh again after %d failed attempts over %.0f s (last: %s)",
                what,
                run.failures,
                now - run.since,
                reason,
            )
        return reason is not None
