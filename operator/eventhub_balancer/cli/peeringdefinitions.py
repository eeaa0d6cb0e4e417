"""``ehb operator --peering`` looks for kopf's peering CRD before kopf starts.

Without it kopf keeps the replica paused, serving no consumer, and says so at DEBUG only; with
named namespaces it scans no CRD (`handlers.kopfwiring.configure`), so the replica stayed
paused after the CRD was applied, until a restart. Exiting instead, with what to apply, the
replica is restarted by Kubernetes until the CRD is there.

The CRD deleted while the replica runs ends kopf (its peering observer's watch answers 404),
and the operator stops with `errors.ResourceGone`; `gone` names the peering CRD in that line
when it is the one missing, and the restart then stops at this check until it is back.
Verified on the real control plane (`tests/realkube/wire/test_crds_deleted.py`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from eventhub_balancer import errors

if TYPE_CHECKING:
    from eventhub_balancer.adapters import kubeapi
    from eventhub_balancer.handlers import running

logger = logging.getLogger(__name__)

#: kopf's peering resources, as manifests/peering/kopf-peering-crds.yaml defines them.
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"


async def check(api: kubeapi.KubeAPI, options: running.Options) -> None:
    """With ``--peering``, refuse to start when kopf's peering CRD is not installed (see the
    module's text). A check that cannot be made (discovery refused or failing) is left to
    kopf."""
    plural = await _missing(api, options)
    if plural is not None:
        raise errors.ConfigurationError(
            f"--peering {options.peering_name}: kopf's peering CRD {plural}.{PEERING_GROUP} is "
            "not installed, and without it this replica would stay paused, serving no "
            "consumer: apply manifests/peering/kopf-peering-crds.yaml once, or run the "
            "operator with --standalone"
        )


async def gone(
    api: kubeapi.KubeAPI, options: running.Options, error: errors.ResourceGone
) -> errors.ResourceGone:
    """What a resource that stopped being served while the operator ran (`error`) says: the
    peering CRD by name when it is the one missing, else `error` as it is."""
    plural = await _missing(api, options)
    if plural is None:
        return error
    return errors.ResourceGone(
        f"--peering {options.peering_name}: kopf's peering CRD {plural}.{PEERING_GROUP} was "
        "deleted while this replica ran, and kopf stopped on it: apply "
        "manifests/peering/kopf-peering-crds.yaml; until then each restart stops at its start, "
        "naming it (or run the operator with --standalone)"
    )


async def _missing(api: kubeapi.KubeAPI, options: running.Options) -> str | None:
    """The plural of kopf's peering CRD when ``--peering`` needs it and discovery says it is
    not served; None when it is, when no peering is used, or when discovery fails."""
    if options.standalone or options.peering_name is None:
        return None
    plural = "clusterkopfpeerings" if options.clusterwide else "kopfpeerings"
    try:
        served = await api.serves(PEERING_GROUP, PEERING_VERSION, plural)
    except errors.EventHubBalancerError as e:
        logger.debug("the peering CRD could not be looked up: %s", e)
        return None
    return None if served else plural
