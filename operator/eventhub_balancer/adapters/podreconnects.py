"""The pod's ConfigMap watch through an API outage: when to reconnect, and what a failure means.

Kept apart from ``adapters.podconfig``, which makes the requests, so that the policy can be
read (and tested) without threads or an API server: `Reconnects` is pure bookkeeping on a
clock the caller passes (how long to pause after a failure, when to say so in the log, when
refused credentials end the watch), and `wrap` turns a failed request into the project's
errors: refused credentials (401/403), which waiting never fixes, are an
`errors.ConfigurationError` that names the RBAC rule to add; anything else is transient.
What the client itself may send again is `kuberetries.Retries`.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from kubernetes.client import exceptions as k8s_errors

from eventhub_balancer import errors

#: The first pause before reconnecting; doubled per failure in a row, up to the cap.
RECONNECT_BACKOFF_S: Final = 0.5
#: The longest pause between reconnects: an outage costs at most this much after it ends,
#: and a fleet of pods costs the recovering API server one request per pod per this long.
RECONNECT_BACKOFF_MAX_S: Final = 30.0
#: 401/403 answers in a row before the watch gives up: a few, since a token being rotated
#: may be refused once, but waiting never grants a missing RBAC rule.
AUTH_FAILURES_LIMIT: Final = 3
#: During an outage, one warning per this long (with the count since the last one).
OUTAGE_LOG_EVERY_S: Final = 60.0


def backoff(
    failures: int,
    *,
    first: float = RECONNECT_BACKOFF_S,
    most: float = RECONNECT_BACKOFF_MAX_S,
) -> float:
    """The pause after ``failures`` (1 or more) in a row: ``first`` doubling up to ``most``
    (by default the watch's, `RECONNECT_BACKOFF_S` up to `RECONNECT_BACKOFF_MAX_S`)."""
    return min(first * float(2 ** min(failures - 1, 16)), most)


@dataclasses.dataclass
class Reconnects:
    """The watch's reconnect policy and its state through one outage.

    Pure bookkeeping on a clock the caller passes, so that it can be read (and tested)
    without threads: how long to pause after a failure, when to say so in the log, and
    when refused credentials end the watch.

    The log says an outage began at most once per `OUTAGE_LOG_EVERY_S`, and that it ended
    only after a warning said it began: a server that answered lists and broke every watch
    began and ended an outage per reconnect, and the pod logged a warning and a recovery
    each time, for as long as it lasted.
    """

    failures: int = 0
    auth_failures: int = 0
    since: float | None = None
    logged_at: float | None = None
    unlogged: int = 0
    #: When the failures in a row began, and whether a warning said so (then `recovery`
    #: says when they end).
    failing_since: float | None = None
    announced: bool = False

    @property
    def down(self) -> bool:
        return self.since is not None

    def after_failure(self, error: BaseException, *, now: float) -> float:
        """The pause before the next attempt; raises ConfigurationError on refused credentials."""
        self.failures += 1
        if self.since is None:
            self.since = now
        if self.failing_since is None:
            self.failing_since = now
        if refused(error):
            self.auth_failures += 1
            if self.auth_failures >= AUTH_FAILURES_LIMIT:
                raise wrap(error, f"gave up after {self.auth_failures} refusals")
        else:
            self.auth_failures = 0
        return backoff(self.failures)

    def should_log(self, *, now: float) -> bool:
        """The first failure and then one in ``OUTAGE_LOG_EVERY_S``: a bounded log rate."""
        if self.logged_at is None or now - self.logged_at >= OUTAGE_LOG_EVERY_S:
            self.logged_at = now
            self.unlogged = 0
            self.announced = True
            return True
        self.unlogged += 1
        return False

    def outage(self, *, now: float) -> float:
        """Seconds since the API server stopped answering (0 when it answers)."""
        return 0.0 if self.since is None else now - self.since

    def failing(self, *, now: float) -> float:
        """Seconds since the failures in a row began (0 when none)."""
        return 0.0 if self.failing_since is None else now - self.failing_since

    def reachable(self, *, now: float) -> float | None:
        """The API answered again: the outage's length, if there was one.

        The backoff is kept until a watch works too (`healthy`): a server that answers
        lists but drops every watch is still backed off from.
        """
        outage = None if self.since is None else now - self.since
        self.since = None
        return outage

    def recovery(self, *, now: float) -> tuple[int, float] | None:
        """The API answers again: (failures, seconds) of the failures in a row, once, when a
        warning announced them (else nothing to say)."""
        if not self.announced:
            return None
        self.announced = False
        return self.failures, self.failing(now=now)

    def healthy(self) -> None:
        """A watch worked: the next failure starts the backoff and the counts afresh."""
        self.failures = self.auth_failures = 0
        self.failing_since = None


def refused(error: BaseException) -> bool:
    return isinstance(error, k8s_errors.ApiException) and error.status in (401, 403)


def describe(error: BaseException) -> str:
    status = getattr(error, "status", None)
    return f"HTTP {status}" if status else type(error).__name__


def wrap(error: BaseException, what: str) -> errors.EventHubBalancerError:
    if isinstance(error, errors.EventHubBalancerError):
        return error
    if isinstance(error, k8s_errors.ApiException) and error.status in (401, 403):
        return errors.ConfigurationError(
            f"{what}: HTTP {error.status}: the pod's ServiceAccount needs list, watch and "
            "patch on configmaps in its namespace (see manifests/examples/30-consumer-rbac.yaml)"
        )
    status = getattr(error, "status", None)
    detail = f"HTTP {status}" if status else type(error).__name__
    return errors.TransientError(f"{what}: {detail}")
