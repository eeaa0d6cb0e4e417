"""A watch the operator's identity may not make (403), said in one line that names the right.

kopf retries a refused request as it retries an outage (a 403 may come and go while the API
servers are upgraded), through its error backoffs, about a minute: RBAC applied together with
the operator, or a little after it, is met in time. Then it gives up on the watch, and the
operator stops. It said so in kopf's escalation line and two tracebacks of its tasks, and the
error escaped ``ehb`` in a third: 154 lines for one refused watch, replayed on the local API
server, 290 with the pods refused too.

`install` leaves those out of the log (the escalation of a refused watch, and the failure of
kopf's tasks that it ended), and `refused` turns the error kopf ends with into one
`errors.Forbidden`: who was refused what, where, and the RBAC to apply, which ``ehb`` prints
in its one ``ehb: error:`` line before it exits 1. Kubernetes restarts the pod (at a pace
that doubles up to 5 minutes): each start retries for that minute again, and says one warning
and that one line. `tests/handlers/wire/test_refused_watches.py` replays it.
"""

from __future__ import annotations

import contextvars
import logging
import re

from kopf._cogs.clients import errors as kopf_errors

from eventhub_balancer import errors
from eventhub_balancer.handlers import kopfretrylogs

#: kube-apiserver's RBAC refusal: ``User "U" cannot VERB resource "R" in API group "G"``,
#: then `` in the namespace "N"`` or `` at the cluster scope``.
_REFUSAL = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]*)"'
    r'(?: in API group "(?P<group>[^"]*)")?'
    r'(?: in the namespace "(?P<namespace>[^"]*)")?'
)
#: A ServiceAccount's user name, as the API server writes it.
_SERVICE_ACCOUNT = re.compile(r"system:serviceaccount:(?P<namespace>[^:]+):(?P<name>[^:]+)")
#: kopf's logger of its watches' requests (another request's, a patch's, is the object's).
WATCHING = "kopf._cogs.clients.watching"
#: What kopf logs when it gives up on a request, and when one of its tasks ends in an error.
ESCALATION = "failed; escalating:"
TASK_FAILED = " has failed: "
#: What to apply, as the install pages name it.
ADVICE = (
    "apply the chart's RBAC (rbac.create=true, the default: the ClusterRole and "
    "ClusterRoleBinding named after the release, and with watchNamespaces a Role and "
    "RoleBinding in each of them; docs/install.md), or manifests/install/20-rbac.yaml, and "
    "bind it to this identity"
)


class _Refusal:
    """Whether kopf gave up on a watch of this operator's as refused (it is stopping)."""

    def __init__(self) -> None:
        self.given_up = False


#: The operator's `_Refusal`, set by `install` in the task that starts kopf, whose tasks
#: inherit it (as `kopfretrylogs.LOG`): two operators in one process keep their own.
REFUSAL: contextvars.ContextVar[_Refusal] = contextvars.ContextVar("ehb_kopf_refusal")


class _SaidOnExit(logging.Filter):
    """Leaves out kopf's records of a refused watch, which `refused` says when kopf stops, and
    those of kopf's stop that follows (its other requests cut short, retried once more)."""

    def filter(self, record: logging.LogRecord) -> bool:
        refusal = REFUSAL.get(None)
        if refusal is None:  # not in an operator that installed it
            return True
        if refusal.given_up:
            return record.levelno < logging.INFO
        error = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        failed = isinstance(error, kopf_errors.APIForbiddenError) and TASK_FAILED in message
        refusal_said = kopfretrylogs.REFUSED in message
        escalated = record.name == WATCHING and ESCALATION in message and refusal_said
        refusal.given_up = failed or escalated
        return not refusal.given_up


FILTER = _SaidOnExit()
#: kopf's loggers that say a watch given up on (the request's, its tasks') and its stop, and
#: the operator's of kopf's retries.
LOGGERS = (
    WATCHING,
    "kopf._core.reactor.queueing",
    "kopf._core.reactor.orchestration",
    "kopf._core.reactor.running",
    "kopf._core.reactor.observation",
    kopfretrylogs.__name__,
)


def install() -> None:
    """Say a refused watch through `refused`: call it in the task that starts kopf."""
    REFUSAL.set(_Refusal())
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if FILTER not in logger.filters:
            logger.addFilter(FILTER)


def refused(error: kopf_errors.APIForbiddenError, *, retried_seconds: float) -> errors.Forbidden:
    """The one error that says what kopf was refused, whose right it is, and what to apply."""
    said = error.message or str(error) or "403 Forbidden"
    found = _REFUSAL.search(said)
    if found is None:
        return errors.Forbidden(
            f"the Kubernetes API refused a watch of the operator's for {retried_seconds:.0f} s "
            f"of retries (403: {said}): {ADVICE}"
        )
    user = found["user"]
    account = _SERVICE_ACCOUNT.fullmatch(user)
    who = f"ServiceAccount {account['namespace']}/{account['name']}" if account else f"user {user}"
    resource = found["resource"] + (f".{found['group']}" if found["group"] else "")
    where = f"in namespace {found['namespace']}" if found["namespace"] else "cluster-wide"
    return errors.Forbidden(
        f"the operator's identity, {who}, may not {found['verb']} {resource} {where}: the "
        f"Kubernetes API answered 403 for {retried_seconds:.0f} s of retries; {ADVICE}"
    )
