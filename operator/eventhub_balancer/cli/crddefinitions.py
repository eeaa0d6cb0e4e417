"""``ehb operator`` looks for the CRDs it serves through before kopf starts: the
EventHubConsumer's, and with ``--peering`` kopf's peering CRD.

Without the EventHubConsumer CRD kopf says ``Unresolved resources cannot be served`` once and
serves nothing; without the peering CRD it keeps the replica paused, serving no consumer, and
says so at DEBUG only. With named namespaces kopf scans no CRD after its start
(`handlers.kopfwiring.configure`), so either way the replica stayed idle after the CRD was
applied, until a restart. Exiting instead, with what to apply, the replica is restarted by
Kubernetes until the CRD is there.

A CRD deleted while the operator runs ends kopf (its watch answers 404), and the operator
stops with `errors.ResourceGone`; `gone` names the CRD in that line when discovery says which
one is missing, and the restart then stops at this check until it is back. Verified on the real
control plane (`tests/realkube/wire/test_crds_deleted.py`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs

if TYPE_CHECKING:
    from eventhub_balancer.adapters import kubeapi
    from eventhub_balancer.handlers import running

logger = logging.getLogger(__name__)

#: kopf's peering resources, as manifests/peering/kopf-peering-crds.yaml defines them.
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
#: The EventHubConsumer's CRD, as crds/ defines it.
CONSUMERS_CRD = f"{specs.PLURAL}.{specs.GROUP}"


async def check(api: kubeapi.KubeAPI, options: running.Options) -> None:
    """Refuse to start when a CRD the operator needs is not installed (see the module's text).
    A check that cannot be made (discovery refused or failing) is left to kopf."""
    missing = await _missing(api, options)
    if missing == CONSUMERS_CRD:
        raise errors.ConfigurationError(
            f"the EventHubConsumer CRD {CONSUMERS_CRD} is not installed, and without it the "
            "operator serves no consumer: apply crds/ (the chart installs it from its own "
            "crds/ folder; a GitOps tool must sync it before the operator)"
        )
    if missing is not None:
        raise errors.ConfigurationError(
            f"--peering {options.peering_name}: kopf's peering CRD {missing} is not "
            "installed, and without it this replica would stay paused, serving no consumer: "
            "apply manifests/peering/kopf-peering-crds.yaml once, or run the operator with "
            "--standalone"
        )


async def gone(
    api: kubeapi.KubeAPI, options: running.Options, error: errors.ResourceGone
) -> errors.ResourceGone:
    """What a resource that stopped being served while the operator ran (`error`) says: the
    CRD by name when discovery says which one is missing, else `error` as it is."""
    missing = await _missing(api, options)
    if missing is None:
        return error
    if missing == CONSUMERS_CRD:
        return errors.ResourceGone(
            f"the EventHubConsumer CRD {CONSUMERS_CRD} was deleted while the operator ran, "
            "and every EventHubConsumer with it: apply crds/ to serve consumers again; until "
            "then each restart stops at its start, naming it"
        )
    return errors.ResourceGone(
        f"--peering {options.peering_name}: kopf's peering CRD {missing} was deleted while "
        "this replica ran, and kopf stopped on it: apply "
        "manifests/peering/kopf-peering-crds.yaml; until then each restart stops at its start, "
        "naming it (or run the operator with --standalone)"
    )


async def _missing(api: kubeapi.KubeAPI, options: running.Options) -> str | None:
    """The first CRD the operator needs that discovery says is not served (``plural.group``);
    None when all are, or when discovery fails."""
    needed = [(specs.GROUP, specs.VERSION, specs.PLURAL)]
    if not options.standalone and options.peering_name is not None:
        plural = "clusterkopfpeerings" if options.clusterwide else "kopfpeerings"
        needed.append((PEERING_GROUP, PEERING_VERSION, plural))
    for group, version, plural in needed:
        try:
            served = await api.serves(group, version, plural)
        except errors.EventHubBalancerError as e:
            logger.debug("the CRD %s.%s could not be looked up: %s", plural, group, e)
            return None
        if not served:
            return f"{plural}.{group}"
    return None
