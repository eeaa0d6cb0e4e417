"""The EventHubConsumer CRD deleted while the operator runs: kopf keeps serving the consumers,
so that their finalizers come off and the CRD goes.

While a CRD is being deleted, kube-apiserver's discovery lists its resource without the
``patch`` verb (and refuses creates), though it takes the patches that remove finalizers: the
CRD's cleanup deletes every custom resource and waits for them to go. kopf 1.45 reads the
missing verb as a resource it cannot serve (``Non-patchable resources will not be served``)
and stops watching the consumers, so the finalizer it put on each one
(``eventhub-balancer.dev/finalizer``, `kopfwiring.configure`) stays, and the CRD stays
Terminating for good, with the operator running. Replayed on the real control plane:
``kubectl delete -f crds/`` waited for ever.

`install` keeps the EventHubConsumer resource served when ``patch`` is all it lacks; kopf then
sees each consumer's deletion, the operator lets it go as for ``kubectl delete ehc`` and takes
the finalizer off, and the CRD goes. With ``-A`` kopf, which scans CRDs, then stops watching
the consumers and the operator runs on; with ``-n`` the watch answers 404 and the operator
stops in one line (`kopfrefusals.gone`). A kopf that no longer decides this in
``observation._disable_unsuitable_resources`` fails `tests/handlers/test_kopf_teardown.py`.
"""

from __future__ import annotations

from kopf._cogs.structs import references
from kopf._core.reactor import observation

from eventhub_balancer.contracts import specs

#: kopf's own decision, wrapped by `install`.
STOCK_DISABLE = observation._disable_unsuitable_resources


def ours(resource: references.Resource) -> bool:
    """Whether ``resource`` is the EventHubConsumer's."""
    return resource.group == specs.GROUP and resource.plural == specs.PLURAL


def _deleting(resource: references.Resource) -> bool:
    """Discovery's verbs for a resource whose CRD is being deleted: no ``patch``, still
    ``list`` and ``watch``."""
    verbs = set(resource.verbs)
    return "patch" not in verbs and {"list", "watch"} <= verbs


def _disable_unsuitable_resources(
    *, resources: set[references.Resource], selectors: frozenset[references.Selector]
) -> None:
    # Kept out of kopf's sight, so that it neither drops them nor warns that it does.
    terminating = {r for r in resources if ours(r) and _deleting(r)}
    resources.difference_update(terminating)
    STOCK_DISABLE(resources=resources, selectors=selectors)
    resources.update(terminating)


def install() -> None:
    """Keep the EventHubConsumer served while its CRD is deleted (before kopf starts)."""
    observation._disable_unsuitable_resources = _disable_unsuitable_resources
