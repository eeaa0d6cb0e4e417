"""What reading a dependency a spec points at (Event Hubs, the checkpoint store) shares: the
value of its Secret, the error a connection string that can never work gets, the fault as the
condition shows it, the pace of the next attempt, and forgetting a Secret the dependency
rejected. `observing` and `checkpointreads` read through these."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import ports
from eventhub_balancer.reconciling import observations, retries

#: Failures of the Kubernetes API itself (not of what a spec points at): no condition can
#: describe them, since the status cannot be written either; the whole cycle is retried.
KUBE_API_ERRORS = (errors.Conflict, errors.ApiUnavailable)
#: Failures of a dependency a spec points at: shown in a condition, retried with backoff.
DEPENDENCY_ERRORS = (errors.ConfigurationError, errors.TransientError)
#: Configuration errors that asking again cannot mend until the CR or its Secret changes: a
#: host the install does not allow (a malformed connection string is found before the
#: adapter is asked, by `malformed`). Both wait `retries.after_misconfiguration`.
MISCONFIGURED = (errors.EndpointNotAllowed,)


async def secret_value(
    kube: ports.KubePort, namespace: str, creds: specs.Credentials
) -> str | None:
    if creds.secret_ref is None:
        return None
    return await kube.read_secret_key(
        namespace=namespace, name=creds.secret_ref.name, key=creds.secret_ref.key
    )


def malformed(
    namespace: str,
    creds: specs.Credentials,
    connection_string: str | None,
    problem_of: Callable[[str], str | None],
) -> errors.ConfigurationError | None:
    """The error to show for a connection string that can never work: which Secret, what is
    wrong and what to give (never the value); None when its shape is right."""
    problem = None if connection_string is None else problem_of(connection_string)
    if problem is None or creds.secret_ref is None:
        return None
    ref = creds.secret_ref
    return errors.ConfigurationError(f"Secret {namespace}/{ref.name}, key {ref.key!r}, {problem}")


def shown(
    error: errors.EventHubBalancerError, namespace: str, creds: specs.Credentials
) -> observations.Fault:
    """The fault as the condition shows it: a refused host names the Secret it came from."""
    fault = observations.Fault.of(error)
    if isinstance(error, MISCONFIGURED) and creds.secret_ref is not None:
        ref = creds.secret_ref
        where = f"Secret {namespace}/{ref.name}, key {ref.key!r}"
        return dataclasses.replace(fault, message=f"{where}: {fault.message}")
    return fault


def paced(
    backoff: retries.Backoff,
    error: Exception,
    *,
    misconfigured: bool,
    settings: Hashable,
    spec: specs.ConsumerSpec,
    wall: float,
) -> retries.Backoff:
    if misconfigured or isinstance(error, MISCONFIGURED):
        return retries.after_misconfiguration(wall=wall, settings=settings)
    # A hub or group that does not exist is created outside the cluster, then waited for.
    missing = isinstance(error, errors.EventHubNotFound)
    return retries.after_failure(
        backoff,
        wall=wall,
        base=float(spec.balancing.interval_seconds),
        longest=retries.MISSING_BACKOFF_SECONDS if missing else retries.MAX_BACKOFF_SECONDS,
    )


def forget(
    kube: ports.KubePort, namespace: str, creds: specs.Credentials, error: Exception
) -> None:
    """A dependency rejected what the Secret held (credentials, a wrong endpoint: anything
    but a transient fault): the next attempt reads it again, so a rotated or fixed key is used
    as soon as the backoff allows, without watching Secrets."""
    if creds.secret_ref is not None and isinstance(error, errors.ConfigurationError):
        kube.forget_secret(namespace=namespace, name=creds.secret_ref.name)
