"""Ready False while Ready owners read none of what they hold (`Silences`, found by
`deciding.silences`): a consumer pod applies its ConfigMap within a second and says so
(annotation ``eventhub-balancer.dev/applied-generation``), so a Ready owner silent a minute
after it was given partitions has no ConfigMap (``AssignmentNotWritten``: the operator's write
is refused, and `cause` names the refusal its last attempt met, with what to change for that
one) or never applied it (``AssignmentNotApplied``: the selector matches another workload, or
the pods cannot read or patch ConfigMaps). A pod that applied an earlier generation runs a
consumer: a later one on its way is a hand-off, which Balanced and the hand-off timeout cover.

Apart from `conditions`, which asks `ready` in its turn; none of it runs while every Ready
owner has applied its ConfigMap, as on a plain pod deletion.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions, configmaps
from eventhub_balancer.reconciling import observations, podwords

#: How long a Ready pod may hold partitions without a word before Ready says nothing reads
#: them: far above the second a consumer pod takes (a Spark pod is NotReady until its session
#: is warm, then applies), and above a few retries of a refused write.
UNAPPLIED_SECONDS = 60.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Silences:
    """The silent Ready owners past `UNAPPLIED_SECONDS`, each with the partitions it holds, and
    the moments at which the others' silence comes due."""

    unwritten: Mapping[str, int] = dataclasses.field(default_factory=dict)
    unapplied: Mapping[str, int] = dataclasses.field(default_factory=dict)
    due: tuple[float, ...] = ()


def ready(
    found: Silences | None,
    *,
    partitions: int,
    selector: str,
    refused: observations.Fault | None = None,
) -> conditions.Condition | None:
    """Ready False while a Ready owner is silent past `UNAPPLIED_SECONDS`, naming what to
    change (the operator's writes first: no pod can apply what was never written, and
    ``refused`` says why they were not: `cause`); None: none is."""
    if found is None:
        return None
    if found.unwritten:
        holds = podwords.holders(found.unwritten, partitions)
        return conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="AssignmentNotWritten",
            message=conditions.shorten(
                f"{holds}, but the operator has not written "
                f"{'its' if len(found.unwritten) == 1 else 'their'} assignment ConfigMap "
                f"within {UNAPPLIED_SECONDS:g} s: nothing reads them. {cause(refused)}"
            ),
        )
    if found.unapplied:
        holds = podwords.holders(found.unapplied, partitions)
        one = len(found.unapplied) == 1
        return conditions.Condition(
            type=conditions.READY,
            status="False",
            reason="AssignmentNotApplied",
            message=conditions.shorten(
                f"{holds} but {'has' if one else 'have'} not "
                f"applied {'its' if one else 'their'} assignment ConfigMap within "
                f"{UNAPPLIED_SECONDS:g} s: no acknowledgement says they are read. A pod that "
                f"does not run `ehb consume` matches spec.selector ({selector}): narrow the "
                "selector to the consumer pods; or the pods' ServiceAccount lacks patch on "
                "configmaps, which acknowledges an assignment (see the pod's log)"
            ),
        )
    return None


#: An answer that says the ConfigMap is too big to store: kube-apiserver's 1 MiB limit on a
#: ConfigMap (422 ``Too long``), its limit on a request body (413), etcd's on a value.
_TOO_LARGE = ("too long", "too large", "answered 413")


def cause(refused: observations.Fault | None) -> str:
    """The sentence that says why the write did not happen and what to change; ``refused``:
    the last failed ConfigMap write (None: none failed since the operator started, or its
    attempts raised nothing, as in a namespace being deleted)."""
    if refused is None:
        return (
            "No refusal of it is on record since the operator started: the API server refuses "
            "it without a fault while its namespace is being deleted (it goes with its pods); "
            "else the operator's log says what this consumer's cycles meet"
        )
    said = refused.message
    if refused.reason == errors.QuotaExceeded.reason:
        return f"A ResourceQuota on configmaps refuses it: {said}"
    if refused.reason == errors.AdmissionDenied.reason:
        return f"An admission policy or webhook refuses it: {said}"
    if refused.reason == errors.Forbidden.reason:
        return f"The operator's RBAC refuses it: {said}"
    if refused.reason == errors.LabelsRewritten.reason:
        return f"An admission policy or webhook rewrites it: {said}"
    if refused.reason == errors.Conflict.reason:
        return (
            f"The API server answered a conflict at every attempt: {said}. Another writer "
            "holds or keeps changing that ConfigMap (a second operator on this namespace, a "
            "GitOps tool or a controller): stop it from writing ConfigMaps labelled "
            f"{configmaps.MANAGED_SELECTOR}"
        )
    if any(words in said.lower() for words in _TOO_LARGE):
        return (
            f"The API server refuses it as too large: {said}. Give each pod fewer partitions "
            "to hold: run more pods"
        )
    if refused.reason == errors.ApiRejected.reason:
        return f"The API server rejects it as invalid: {said}"
    if refused.reason == errors.ApiUnavailable.reason:
        return (
            f"The API server did not take the write: {said} (retrying with backoff; it "
            "resolves once the API server and the admission webhooks it calls answer)"
        )
    return f"The last attempt failed: {said} (retrying with backoff)"
