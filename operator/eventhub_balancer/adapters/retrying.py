"""One bounded retry budget per checkpoint store operation, and which failures deserve a retry.

The blob client's own retries are off (see ``adapters.blobs``), so this is the only retry
layer between the checkpoint store and Blob Storage: a `Budget` counts the attempts and time
of one operation, backs off with full jitter after transient failures, pauses briefly after
lost races, and turns an exhausted budget into `errors.CheckpointStoreUnreachable`. Kept apart
from the store so that the policy and the classification of errors can be read (and tested)
without the ownership protocol around them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from azure.core import exceptions as azure_errors

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How long an operation keeps trying through transient failures.

    The blob client's own retries are off (see ``adapters.blobs``) so that this budget is the
    only one. It is a budget of time: ``budget_seconds`` for the whole operation, each request
    bounded by ``attempt_timeout_seconds`` (doubled after each that timed out), with
    full-jitter exponential backoff between transient failures and between lost races.
    ``attempts`` (reads and writes of one operation together) only bounds the requests
    against a store that fails at once: a count alone ran out within 0.1 s of backoff, far
    sooner than the 503s of a busy account or a blob lease pass.
    """

    #: A bound on requests, not the budget: with the backoff below, 100 requests take about
    #: a minute, so ``budget_seconds`` ends an operation first.
    attempts: int = 100
    #: Longer than a blob lease (``checkpointrequests.LEASE_SECONDS``) and a throttled
    #: account's usual Retry-After, so that what the store waits on can pass within it.
    budget_seconds: float = 20.0
    attempt_timeout_seconds: float = 5.0
    base_delay_seconds: float = 0.05
    max_delay_seconds: float = 2.0
    #: A seed makes the jitter reproducible (tests, benchmarks); None seeds from the OS.
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise errors.InvalidInput("retry.attempts", f"{self.attempts} is less than 1")
        if self.budget_seconds <= 0 or self.attempt_timeout_seconds <= 0:
            raise errors.InvalidInput("retry", "budget and attempt timeout must be positive")

    def backoff(self, *, failures: int, rng: random.Random) -> float:
        """Full jitter: uniform in [0, min(max, base * 2^(failures-1))]."""
        ceiling = min(self.max_delay_seconds, self.base_delay_seconds * 2 ** max(failures - 1, 0))
        return rng.uniform(0.0, ceiling)


#: The budget of a store whose caller gives none (a frozen value: one instance serves all).
DEFAULT_POLICY: Final = RetryPolicy()

#: The first pause after a lost race; doubled per conflict up to the policy's max delay.
CONFLICT_DELAY_S: Final = 0.005

#: Status codes that may pass with time: timeouts, throttling, server errors.
TRANSIENT_STATUS: Final = frozenset({408, 429, 500, 502, 503, 504})


#: What to change for each 403 the storage service gives a checkpoint store's credentials.
FORBIDDEN_OTHERWISE: Final = (
    "check the checkpoint store's role assignment or SAS on the storage account"
)
_PERMISSIONS: Final = (
    "with workload identity, give the identity Storage Blob Data Contributor on the storage "
    "account (Storage Blob Data Reader where it only reads); a SAS must allow read, create, "
    "write and list (sp=rcwl)"
)
FORBIDDEN: Final = {
    "AuthorizationPermissionMismatch": f"the credentials lack a permission: {_PERMISSIONS}",
    "AuthorizationFailure": (
        "the account refused this client: check that the key is right, that a SAS has not "
        "expired (se=) and was made for this container, and that the storage account's "
        "firewall lets the cluster's egress through"
    ),
    "AuthorizationResourceTypeMismatch": (
        "the account SAS must allow the resource types container and object (srt=co)"
    ),
    "AuthorizationServiceMismatch": "the account SAS must allow the blob service (ss=b)",
    "AuthorizationSourceIPMismatch": (
        "the SAS does not allow this client's address: widen its IP range (sip) or drop it"
    ),
    "AuthorizationProtocolMismatch": "the SAS allows HTTPS only: use an https:// endpoint",
    "KeyBasedAuthenticationNotPermitted": (
        "the storage account does not allow its keys (a connection string with AccountKey): "
        "use workload identity (accountUrl) or allow shared key access on the account"
    ),
}


def is_transient(error: BaseException) -> bool:
    """Whether retrying the same request may succeed."""
    if isinstance(error, TimeoutError | ConnectionError | OSError):
        return True
    if isinstance(error, azure_errors.ServiceRequestError | azure_errors.ServiceResponseError):
        return True
    if isinstance(error, azure_errors.IncompleteReadError):
        return True
    if isinstance(error, azure_errors.HttpResponseError):
        return error.status_code in TRANSIENT_STATUS
    return False


def error_code(error: BaseException) -> str | None:
    """The storage service's ``x-ms-error-code`` (the SDK sets it on its errors at run time)."""
    code = getattr(error, "error_code", None)
    return None if code is None else str(getattr(code, "value", code))


def describe(error: BaseException) -> str:
    """One line about a failure, without request details that could carry a SAS token."""
    if isinstance(error, azure_errors.HttpResponseError) and error.status_code is not None:
        raw = error_code(error)
        code = f" {raw}" if raw else ""
        return f"HTTP {error.status_code}{code} ({type(error).__name__})"
    if isinstance(error, TimeoutError):
        return "timed out"
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:300]


class Budget:
    """The attempts and time left to one store operation."""

    def __init__(self, *, policy: RetryPolicy, rng: random.Random, operation: str) -> None:
        self.policy = policy
        self.rng = rng
        self.operation = operation
        self.started = _now()
        self.attempts = 0
        self.failures = 0
        self.conflicts = 0
        #: Attempts that got no answer within their timeout (`attempt_timeout`).
        self.timeouts = 0

    def elapsed(self) -> float:
        return _now() - self.started

    def attempt_timeout(self) -> float:
        """``attempt_timeout_seconds``, doubled for each attempt of this operation that timed
        out, within what is left of the budget.

        A store that answers, only slower than one attempt may take (an account under load),
        would otherwise time out at every attempt until the budget was spent, each retry adding
        to its load, while the first attempt's write had landed: a slow store read as an
        unreachable one. A store that does not answer at all costs the same budget.
        """
        left = self.policy.budget_seconds - self.elapsed()
        grown: float = self.policy.attempt_timeout_seconds * 2.0**self.timeouts
        # Never below a sliver: a last attempt must be able to complete at all.
        return max(0.05, min(grown, left))

    def _exhausted(self) -> bool:
        return self.attempts >= self.policy.attempts or self.elapsed() >= self.policy.budget_seconds

    def _give_up(self, last: str, cause: BaseException | None) -> errors.CheckpointStoreUnreachable:
        error = errors.CheckpointStoreUnreachable(
            f"{self.operation}: gave up after {self.attempts} attempt(s) over "
            f"{self.elapsed():.1f} s (budget {self.policy.attempts} attempts, "
            f"{self.policy.budget_seconds:g} s); last error: {last}"
        )
        # The status shows it without the attempts made and seconds taken: each failed listing
        # of the operator's would rewrite it otherwise, with nothing changed. It names the
        # limit that was reached: "(budget 100 attempts, 5 s)" read as 100 attempts made where
        # one had waited out the 5 s.
        spent = (
            f"{self.policy.attempts} attempts"
            if self.attempts >= self.policy.attempts
            else f"{self.policy.budget_seconds:g} s"
        )
        error.steady = f"{self.operation}: gave up, its budget of {spent} spent; last error: {last}"
        # What each partition's report says: the same words for all the partitions an outage
        # stops (`consumer.restarts`), which the operator then says once for them.
        error.cause = (
            f"gave up on the checkpoint store, a call's budget of {spent} spent; last error: {last}"
        )
        error.__cause__ = cause
        return error

    async def after_failure(self, error: BaseException) -> None:
        """Back off before the next attempt, or raise when the budget is spent."""
        self.failures += 1
        if self._exhausted():
            raise self._give_up(describe(error), error)
        delay = min(
            self.policy.backoff(failures=self.failures, rng=self.rng),
            max(0.0, self.policy.budget_seconds - self.elapsed()),
        )
        logger.debug("%s: %s; retrying in %.3f s", self.operation, describe(error), delay)
        await asyncio.sleep(delay)

    async def after_conflict(self, what: str, *, at_most: float | None = None) -> None:
        """A lost race (412/409): re-read after a jittered pause, within the same budget.

        The pause starts short (a racing writer is done in milliseconds) and doubles per
        conflict up to the policy's max delay, so that a longer hold (a lease) costs few
        requests rather than the whole budget at once. ``at_most`` caps the pause when the
        caller knows when it wants to look again.
        """
        self.conflicts += 1
        if self._exhausted():
            raise self._give_up(what, None)
        ceiling = min(self.policy.max_delay_seconds, CONFLICT_DELAY_S * 2 ** (self.conflicts - 1))
        pause = self.rng.uniform(0.0, ceiling)
        if at_most is not None:
            pause = max(0.0, min(pause, at_most))
        await asyncio.sleep(pause)

    async def call(self, request: Callable[[], Awaitable[T]]) -> T:
        self.attempts += 1
        deadline = asyncio.timeout(self.attempt_timeout())
        try:
            async with deadline:
                return await request()
        except TimeoutError:
            if deadline.expired():
                self.timeouts += 1
            raise


async def call_with_retries(budget: Budget, request: Callable[[], Awaitable[T]]) -> T:
    """The answer to ``request``, sent again after each transient failure within ``budget``.

    A failure that is an answer (a blob that does not exist, a lost race) is the request's to
    turn into a value, and an error of this project that it raises (a missing container) ends
    the operation as it is; any other failure is retried if transient, else raised as ours.
    """
    while True:
        try:
            return await budget.call(request)
        except errors.EventHubBalancerError:
            raise
        except Exception as e:
            raise_unless_transient(e, budget)
            await budget.after_failure(e)


def _now() -> float:
    """The event loop's clock, which its sleeps (and a test's fake time) run on."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:  # built outside a loop: its sleeps will not run there either
        return time.monotonic()


def raise_unless_transient(error: Exception, budget: Budget) -> None:
    """Return if a retry may succeed; otherwise raise it as this project's error."""
    if is_transient(error):
        return
    if isinstance(error, azure_errors.ClientAuthenticationError):
        cause = (
            f"the blob service rejected our credentials ({describe(error)}); check the "
            "checkpoint store's connection string (its key, or a SAS token that may have "
            "expired) or workload identity"
        )
        raise errors.CheckpointStoreRefused(f"{budget.operation}: {cause}", cause=cause) from error
    if isinstance(error, azure_errors.HttpResponseError) and error.status_code == 403:
        # Forbidden at every attempt until someone grants what is missing: say what.
        what = FORBIDDEN.get(error_code(error) or "", FORBIDDEN_OTHERWISE)
        cause = f"the blob service forbids it ({describe(error)}): {what}"
        raise errors.CheckpointStoreRefused(f"{budget.operation}: {cause}", cause=cause) from error
    if isinstance(error, azure_errors.AzureError):
        raise errors.CheckpointStoreUnreachable(
            f"{budget.operation}: the blob service refused the request ({describe(error)})"
        ) from error
    raise error
