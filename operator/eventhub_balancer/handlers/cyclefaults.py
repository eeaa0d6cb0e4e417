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

import dataclasses
import logging

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

#: A fault that lasts is reminded of at most this often (a consumer's line), not at each retry.
REMIND_SECONDS = 600.0


class CycleFaults:
    """One consumer's run of failed cycles, as the daemon meets them (its alone)."""

    def __init__(self, namespace: str, name: str) -> None:
        self._who = f"{namespace}/{name}"
        self._reason: str | None = None
        self._since = 0.0
        self._said = 0.0
        self._failures = 0

    def failed(self, error: errors.EventHubBalancerError, *, retry_in: float, now: float) -> None:
        """A cycle failed with ``error``; the next attempt is in ``retry_in`` s (loop time
        ``now``)."""
        if self._reason is None:
            self._since, self._failures = now, 0
        self._failures += 1
        if error.reason != self._reason:
            self._reason, self._said = error.reason, now
            logger.warning("%s: cycle failed (%s), retrying in %.1f s", self._who, error, retry_in)
        elif now - self._said >= REMIND_SECONDS:
            self._said = now
            logger.warning(
                "%s: cycles still failing, %d attempts over %.0f s (%s), retrying in %.1f s",
                self._who,
                self._failures,
                now - self._since,
                error,
                retry_in,
            )
        else:
            logger.debug("%s: cycle failed (%s), retrying in %.1f s", self._who, error, retry_in)

    def succeeded(self, *, now: float) -> None:
        """A cycle succeeded: the fault under way, if any, is over."""
        if self._reason is None:
            return
        logger.info(
            "%s: cycles succeed again after %d failed attempts over %.0f s (last: %s)",
            self._who,
            self._failures,
            now - self._since,
            self._reason,
        )
        self._reason = None


@dataclasses.dataclass
class _Fault:
    reason: str
    since: float
    said: float
    failures: int = 0


class ListingFaults:
    """The listings that are failing now, by what they list (``pods in shop``), as one
    relisting meets them; logged on ``logger``."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._faults: dict[str, _Fault] = {}

    def failed(self, what: str, error: errors.EventHubBalancerError, *, now: float) -> None:
        """Listing ``what`` failed with ``error`` (loop time ``now``)."""
        fault = self._faults.get(what)
        if fault is None or fault.reason != error.reason:
            since = fault.since if fault is not None else now
            failures = fault.failures if fault is not None else 0
            fault = self._faults[what] = _Fault(error.reason, since, now, failures)
            self._logger.warning("%s were not listed afresh: %s", what, error)
        elif now - fault.said >= REMIND_SECONDS:
            fault.said = now
            self._logger.warning(
                "%s still not listed afresh, %d attempts over %.0f s (%s)",
                what,
                fault.failures + 1,
                now - fault.since,
                error,
            )
        else:
            self._logger.debug("%s were not listed afresh: %s", what, error)
        fault.failures += 1

    def succeeded(self, what: str, *, now: float) -> bool:
        """Listing ``what`` succeeded: its fault, if any, is over (then True)."""
        fault = self._faults.pop(what, None)
        if fault is not None:
            self._logger.info(
                "%s listed afresh again after %d failed attempts over %.0f s (last: %s)",
                what,
                fault.failures,
                now - fault.since,
                fault.reason,
            )
        return fault is not None
