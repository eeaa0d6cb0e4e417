"""An Event Hubs SDK processor left running on the consumer group, told from its ownership blobs.

A user migrating from EventProcessorClient who forgets one processor on the same consumer
group and container sees nothing wrong: the pods' epoch receivers refuse each of its receivers,
and it goes on claiming partitions in its ``ownership/`` blobs. The store's probe
(`checkpointreads.read_store`, once every `deadlines.CHECKPOINT_PROBE_SECONDS`) lists those
blobs (names and ETags only, one request) and this module compares their ETags with the last
probe's, entered only once a probe found a claim.

A running processor rewrites its claims at every balancing pass (it renews them, or releases
them after a refused receiver and claims again); one stopped cleanly, as the migration says to,
rewrites them once, when it releases them. So a rewrite in two probe intervals running is a
processor beside the pods, and two intervals without one end it. The owner id is no sign
either way: the Python SDK blanks it right after each refused receiver. Balancing does not
change: the pods keep their partitions; the status, one Event and one log line say it
(`reconciling.foreignreaders`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Mapping

from eventhub_balancer.balancing import partitionlists
from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import memories
from eventhub_balancer.reconciling import deadlines, foreignreaders

logger = logging.getLogger(__name__)


def watched(
    store: memories.StorePacing,
    listed: Mapping[str, str],
    *,
    key: str,
    spec: specs.ConsumerSpec,
    where: Hashable,
) -> memories.StorePacing:
    """``store`` with the ownership blobs ``listed`` by this probe ({partition: ETag}) in the
    store ``where`` (`observing.store_key`); a processor found or gone is logged once. The
    claims of a store the spec no longer names are no earlier state of these (an edit of the
    container or the consumer group): the watch starts again."""
    before = store.claims if store.claims.key == where else memories.Claims(key=where)
    rewritten = sorted(
        (
            p
            for p, etag in listed.items()
            if before.etags is not None and before.etags.get(p) != etag
        ),
        key=lambda p: (len(p), p),
    )
    if rewritten:
        claims = memories.Claims(
            key=where,
            etags=dict(listed),
            rewritten=before.rewritten + 1,
            live=before.live or before.rewritten + 1 >= foreignreaders.INTERVALS,
        )
    else:
        claims = memories.Claims(
            key=where,
            etags=dict(listed),
            quiet=before.quiet + 1,
            live=before.live and before.quiet + 1 < foreignreaders.INTERVALS,
        )
    if claims.live and not before.live:
        named = partitionlists.named(rewritten, 16)
        minutes = foreignreaders.INTERVALS * deadlines.CHECKPOINT_PROBE_SECONDS / 60
        seen = f"in the last {minutes:g} minutes, partitions {named}"
        logger.warning("%s: %s", key, foreignreaders.message(spec, seen=seen))
    elif before.live and not claims.live:
        logger.info("%s: %s", key, foreignreaders.GONE)
    return dataclasses.replace(store, claims=claims)
