"""``ehb operator --peering`` looks for kopf's peering CRD before kopf starts.

Without it kopf keeps the replica paused, serving no consumer, and says so at DEBUG only; with
named namespaces it scans no CRD (`handlers.kopfwiring.configure`), so the replica stayed
paused after the CRD was applied, until a restart. Exiting instead, with what to apply, the
replica is restarted by Kubernetes until the CRD is there.
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
    if options.standalone or options.peering_name is None:
        return
    plural = "clusterkopfpeerings" if options.clusterwide else "kopfpeerings"
    try:
        served = await api.serves(PEERING_GROUP, PEERING_VERSION, plural)
    except errors.EventHubBalancerError as e:
        logger.debug("the peering CRD could not be looked up: %s", e)
        return
    if not served:
        raise errors.ConfigurationError(
            f"--peering {options.peering_name}: kopf's peering CRD {plural}.{PEERING_GROUP} is "
            "not installed, and without it this replica would stay paused, serving no "
            "consumer: apply manifests/peering/kopf-peering-crds.yaml once, or run the "
            "operator with --standalone"
        )
