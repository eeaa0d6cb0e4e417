"""Whether the last decision still stands, and what to read after the writes: pure.

Reading the pods and deciding cost what the fleet costs, and most wake-ups change nothing
(the interval's safety net, the echo of the operator's own writes, another consumer's event).
A decision that wrote and read nothing more is kept (`Settled`) with the inputs it was taken
from (`inputs`): the watch's stamp of what concerns the consumer, the CR's uid and
resourceVersion, the partition list, the peers and the store's state. A cycle that finds the
same inputs before the decision's next deadline (`deciding.Decision.settled_until`) or the
store's next probe reads nothing more and decides nothing: the decision stands (`stands`).

A cycle that starts hand-offs lists the checkpoint blobs once its writes are done, for the
cycle the releases wake (`lists_ahead`): that one gives the partitions out and needs the
blobs' epochs, and finds them listed if the listing is at most `retries.AHEAD_SECONDS` old.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from eventhub_balancer.reconciling import deciding, observations, retries


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settled:
    """A decision that wrote nothing, the inputs it was taken from, and until when (wall
    seconds) it stands over them."""

    inputs: Hashable
    until: float
    decided_at: float
    decision: deciding.Decision


def inputs(stamp: Hashable | None, observation: observations.Observation) -> Hashable | None:
    """What a settled decision is taken from, short of the pods and ConfigMaps (``stamp``, the
    cache's, stands for them); None when a change could go unnoticed (no watch, no
    resourceVersion, no valid spec)."""
    meta = observation.body.get("metadata") or {}
    version = meta.get("resourceVersion")
    if stamp is None or not version or observation.spec is None:
        return None
    return (
        stamp,
        meta.get("uid"),
        version,
        observation.hub,
        observation.peers,
        observation.annotate_pods,
        observation.store.fault,
        observation.store.checked_at,
    )


def settle(
    decision: deciding.Decision,
    taken_from: Hashable | None,
    *,
    wall: float,
    store_backoff: retries.Backoff,
    store_checked_at: float | None,
) -> Settled | None:
    """``decision`` kept with what it was taken from, when it stands until a deadline (it
    writes nothing and reads nothing more); None otherwise."""
    if taken_from is None or decision.settled_until is None:
        return None
    until = min(decision.settled_until, retries.next_probe(store_checked_at, store_backoff))
    return Settled(inputs=taken_from, until=until, decided_at=wall, decision=decision)


def stands(kept: Settled | None, taken_from: Hashable | None, *, wall: float) -> bool:
    """Whether ``kept`` stands for a cycle at ``wall`` whose inputs are ``taken_from``."""
    return (
        kept is not None
        and taken_from is not None
        and kept.inputs == taken_from
        and (wall < kept.until)
    )


def standing(kept: Settled, *, wall: float) -> deciding.Decision:
    """The settled decision again at ``wall``: nothing to write, no figures to record again,
    its deadline (if any) as far away as it is now."""
    decision = kept.decision
    next_in = decision.next_in
    if next_in is not None:
        next_in = max(deciding.MIN_NEXT_IN, kept.decided_at + next_in - wall)
    return dataclasses.replace(decision, figures=None, next_in=next_in)


def lists_ahead(
    decision: deciding.Decision, observation: observations.Observation, *, wall: float
) -> bool:
    """Whether the blobs are to be listed after this decision's writes: it revokes (the
    releases wake the cycle that gives out), or a partition waits for a release (a
    terminating pod's, or hand-offs started before) and no listing made ahead stands."""
    if observation.spec is None:
        return False
    if any(m.kind == "revoke" for m in decision.moves):
        return True
    ahead = observation.store.ahead_at
    return decision.awaits_release and not retries.ahead_stands(ahead, wall=wall)
