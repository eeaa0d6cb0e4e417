"""The pod's ConfigMap watch through an API outage: when to reconnect, and what a failure means.

Kept apart from ``adapters.podconfig``, which makes the requests, so that the policy can be
read (and tested) without threads or an API server: `Reconnects` is pure bookkeeping on a
clock the caller passes (how long to pause after a failure, when to say so in the log, when
refused credentials stand), and `wrap` turns a failed request into the project's errors:
refused credentials (401/403) are an `errors.ConfigurationError` that quotes the API server
and names the fix (the RBAC rule to grant, or a token to renew); anything else is transient.
Refusals do not end the watch: a RoleBinding pruned by a GitOps sync comes back at the next
one, and a pod that exited crash-looped meanwhile, every pod of the consumer at once, and
stayed in the kubelet's back-off after the RoleBinding was back.
What the client itself may send again is `kuberetries.Retries`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Final

from kubernetes.client import exceptions as k8s_errors

from eventhub_balancer import errors

#: The first pause before reconnecting; doubled per failure in a row, up to the cap.
RECONNECT_BACKOFF_S: Final = 0.5
#: The longest pause between reconnects: an outage costs at most this much after it ends,
#: and a fleet of pods costs the recovering API server one request per pod per this long.
RECONNECT_BACKOFF_MAX_S: Final = 30.0
#: 401/403 answers in a row before the refusal stands (said in the log, the pod NotReady): a
#: few, since a token being rotated may be refused once.
AUTH_FAILURES_LIMIT: Final = 3
#: During an outage, one warning per this long (with the count since the last one).
OUTAGE_LOG_EVERY_S: Final = 60.0
#: While a refusal stands, its cause is said again once per this long.
REFUSAL_LOG_EVERY_S: Final = 300.0


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
    #: The last of the refusals (401/403) in a row, and when they were last said.
    last_refusal: BaseException | None = None
    refusal_said_at: float | None = None

    @property
    def down(self) -> bool:
        return self.since is not None

    @property
    def refusal(self) -> BaseException | None:
        """The refusal that stands: `AUTH_FAILURES_LIMIT` in a row, and no list answered
        since (None: none). A pod that may list but not watch still reads its ConfigMap."""
        if self.down and self.auth_failures >= AUTH_FAILURES_LIMIT:
            return self.last_refusal
        return None

    def after_failure(self, error: BaseException, *, now: float) -> float:
        """The pause before the next attempt, refused credentials included."""
        self.failures += 1
        if self.since is None:
            self.since = now
        if self.failing_since is None:
            self.failing_since = now
        if refused(error):
            self.auth_failures += 1
            self.last_refusal = error
        else:
            self.auth_failures = 0
        return backoff(self.failures)

    def should_say_refusal(self, *, now: float) -> bool:
        """Whether to say the refusals in a row now: once they reach `AUTH_FAILURES_LIMIT`,
        then once per `REFUSAL_LOG_EVERY_S` while they go on."""
        if self.auth_failures < AUTH_FAILURES_LIMIT:
            return False
        if self.refusal_said_at is not None and now - self.refusal_said_at < REFUSAL_LOG_EVERY_S:
            return False
        self.refusal_said_at = self.logged_at = now
        self.announced = True
        return True

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
        self.failing_since = self.refusal_said_at = None


def refused(error: BaseException) -> bool:
    return isinstance(error, k8s_errors.ApiException) and error.status in (401, 403)


def describe(error: BaseException) -> str:
    status = getattr(error, "status", None)
    return f"HTTP {status}" if status else type(error).__name__


def wrap(error: BaseException, what: str) -> errors.EventHubBalancerError:
    if isinstance(error, errors.EventHubBalancerError):
        return error
    if isinstance(error, k8s_errors.ApiException) and error.status == 401:
        return errors.ConfigurationError(
            f"{what}: HTTP 401{_said(error)}: the API server no longer accepts the pod's "
            "ServiceAccount token (the ServiceAccount was deleted, or deleted and created "
            "again, since the pod started): create the ServiceAccount if it is gone, then "
            "delete the pod, whose replacement gets a token of it"
        )
    if isinstance(error, k8s_errors.ApiException) and error.status == 403:
        return errors.ConfigurationError(
            f"{what}: HTTP 403{_said(error)}: the pod's ServiceAccount needs list, watch and "
            "patch on configmaps in its namespace: a Role that grants them and a RoleBinding "
            "of it to the ServiceAccount (manifests/examples/30-consumer-rbac.yaml; the "
            "consumer chart's are named after its release)"
        )
    return errors.TransientError(f"{what}: {describe(error)}")


def _said(error: k8s_errors.ApiException) -> str:
    """What the API server said of a refusal (its Status message, one line), as `` (...)``."""
    try:
        message = json.loads(error.body or "")["message"]
    except (ValueError, TypeError, KeyError):
        return ""
    if not isinstance(message, str) or not message.strip():
        return ""
    line = " ".join(message.split())
    return f" ({line[:300]})"
