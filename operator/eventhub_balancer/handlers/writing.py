"""The writing half of a cycle: what a `decisions.Decision` says, in the order that is safe.

The order of writes is what makes a crash at any point safe, and a stale read harmless:
1. the status, whole, whenever the decision writes anything: conditioned on the CR's
   resourceVersion the decision was read from, it carries status.epochs when an epoch goes
   up and the operator's record of the assignment (status.assignment), so epochs never go
   back even if every ConfigMap is lost right after and the record always agrees with them;
   and a decision taken from a stale record is refused here (409), before anything else of
   it goes out. A decision that writes ConfigMaps and leaves the status as it is sends an
   empty status patch, for that precondition alone;
2. the ConfigMaps that gain a partition, those that start a hand-off and those that drop
   only what their pod released (none takes away what a pod still runs: the old owner
   releases, and the next cycle gives out), with the Events of the moves the record now
   holds;
3. then, together, those that take a partition from a pod that may still run it (a crash in
   between leaves a duplicate claim that the higher epoch resolves), pod annotations and the
   deletion of stale ConfigMaps.

The writes within one step are independent and go out concurrently, sent in the order that
matters to a server that answers one request after another: revocations first (a release, an
acknowledgement and another cycle still follow them), then gains, Events last (nobody waits
on them). The operator's cycles hand their Events to a poster instead (`eventposts`), at the
same point: posted beside the cycles one at a time, they no longer hold a cycle's step, and
with it the next cycle, up. A step starts only once the step before it succeeded, so a
conflict stops the rest of the decision. A cycle that only revokes takes two round trips to
the API server (the status, then its revocations), and so does one that gives out epochs
from released partitions; one that takes a partition from a pod still running it takes three.

Every write that depends on what was read carries a precondition, so that a stale read costs
a retry, never a wrong result: the status patch carries the CR's resourceVersion the decision
was taken from (`decisions.Decision.resource_version`), and every other write goes after it; a
ConfigMap patch that changes the data alone carries the ConfigMap's uid and data generation
(the pod writes only annotations, so its acknowledgements never make such a write conflict),
any other the ConfigMap's resourceVersion; and a new ConfigMap is create-only. A 409 anywhere
fails the cycle before its next step, and the daemon reads the consumer afresh and decides
again.

Nothing is decided here: `reconciling.writes` orders the ConfigMaps (gaining first) and
`reconciling.deciding` computes every body and patch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers import ports
from eventhub_balancer.reconciling import decisions, observations, writes

logger = logging.getLogger(__name__)


#: Takes an Event's body and posts it later, without waiting (`eventposts.Poster.post`).
Handover = Callable[[Mapping[str, Any]], None]


async def apply(
    *,
    kube: ports.KubePort,
    namespace: str,
    name: str,
    decision: decisions.Decision,
    events: Handover | None = None,
) -> int:
    """Carry out ``decision`` step by step; the number of writes (its Events counted).

    The status goes first, conditioned on the CR's resourceVersion the decision was read
    from, whenever the decision writes anything: a decision taken from a stale record is
    refused there (409), before any ConfigMap, pod annotation or Event of it goes out. A
    decision that writes ConfigMaps and leaves the status as it is sends an empty status
    patch for that precondition alone (it changes nothing, so the API server stores nothing).

    With ``events``, the Events are handed over where they would be posted, and the cycle
    does not wait for them (`eventposts`); without, they are posted in the steps."""
    status = dict(decision.status)
    if decision.epochs is not None:
        # The epochs and the record of who holds them, and the rest of the status, at once.
        first: dict[str, Any] = {"epochs": dict(decision.epochs)}
        if decision.record is not None:
            first["assignment"] = [dict(entry) for entry in decision.record]
        status = {**first, **status}
    bodies = list(decision.event_bodies)
    if not (status or bodies or decision.writes.count):
        return 0
    await kube.patch_consumer_status(
        namespace=namespace, name=name, status=status, resource_version=decision.resource_version
    )
    count = 1 + await apply_writes(
        kube=kube,
        namespace=namespace,
        planned=decision.writes,
        events=events,
        # The record holds the moves now: their Events go out with the first ConfigMaps, so
        # that a later failure of this cycle (a ConfigMap write that conflicts with a pod's
        # acknowledgement) does not lose them.
        with_gains=[_event(kube, body, events) for body in bodies],
    )
    return count + len(bodies)


async def _event(kube: ports.KubePort, body: Mapping[str, Any], events: Handover | None) -> None:
    """Post one Event in its step, or hand it over there: either way only once the step before
    succeeded, and, handed over, after the step's ConfigMap writes were sent."""
    if events is None:
        await post_event(kube, body)
    else:
        events(body)


async def apply_writes(
    *,
    kube: ports.KubePort,
    namespace: str,
    planned: writes.Writes,
    with_gains: Sequence[Awaitable[Any]] = (),
    events: Handover | None = None,
) -> int:
    """The ConfigMaps that gain, start a hand-off or let go of what their pod released, then
    together those that lose, pod annotations and deletions; the number of ConfigMap and pod
    writes. The status that
    records what they carry out is written before (`apply`).

    The writes of one step do not depend on each other and go out together (a hand-off waits
    for them); the second step starts only once every write of the first succeeded, so the
    ConfigMaps that lose a partition are written only after all those that gain one, and a
    conflict in the first step stops the second. ``with_gains`` (the Events) go out with the
    first step.
    ``events`` takes the Event of a squatted ConfigMap name, as `apply`'s take the moves'.
    """
    asks: list[writes.MapWrite] = []
    gains: list[writes.MapWrite] = []
    rest: list[writes.MapWrite] = []
    for w in planned.maps:
        if w.revokes and not w.gains:
            asks.append(w)
        else:
            (gains if w.gains or w.lets_go else rest).append(w)
    # The revocations are sent first: a release, its acknowledgement and another cycle are
    # still to come after them, while a gain ends its hand-off once the pod reads it.
    first = asks + gains
    if first or with_gains:
        await _together(
            [
                *(_write_map(kube, namespace=namespace, write=w, events=events) for w in first),
                *with_gains,
            ]
        )
    await _together(
        [
            *(_write_map(kube, namespace=namespace, write=w, events=events) for w in rest),
            *(
                kube.patch_pod_annotations(
                    namespace=namespace, name=a.pod, annotations=a.annotations
                )
                for a in planned.pods
            ),
            *(
                kube.delete_configmap(namespace=namespace, name=d.name, uid=d.uid or None)
                for d in planned.deletes
            ),
        ]
    )
    return planned.count


async def _write_map(
    kube: ports.KubePort, *, namespace: str, write: writes.MapWrite, events: Handover | None
) -> Mapping[str, Any]:
    """One ConfigMap written; a failure names it (``configmap``), so that the cycle keeps
    why its writes did not go out (`refused`)."""
    try:
        if write.create:
            stored = await create_configmap(kube, namespace=namespace, write=write, events=events)
        else:
            stored = await patch_configmap(kube, namespace=namespace, write=write)
        await kept_labels(kube, namespace=namespace, write=write, stored=stored)
    except errors.EventHubBalancerError as e:
        e.configmap = write.name
        raise
    return stored


def refused(error: BaseException) -> observations.Fault | None:
    """Why a ConfigMap write failed, when ``error`` is that failure (`_write_map`): what
    Ready's ``AssignmentNotWritten`` names (`reconciling.silentowners.cause`)."""
    if isinstance(error, errors.EventHubBalancerError) and error.configmap is not None:
        return observations.Fault.of(error)
    return None


async def kept_labels(
    kube: ports.KubePort, *, namespace: str, write: writes.MapWrite, stored: Mapping[str, Any]
) -> None:
    """Raise `errors.LabelsRewritten` when the API server answered ``write`` with other labels
    than the operator's (a mutating admission policy or webhook rewrote them), having deleted
    that ConfigMap: neither the operator's watch nor the pod finds it, and left in place it
    would be met at the next create as one someone else made (reported as tampered with,
    deleted, created again, at every cycle). The cycle fails, so the daemon backs off (up to
    a minute) and the log says it once (`cyclefaults`)."""
    meta: Mapping[str, Any] = stored.get("metadata") or {}
    consumer = (write.body.get("data") or {}).get(configmaps.KEY_CONSUMER)
    wanted = (write.body.get("metadata") or {}).get("labels") or (
        configmaps.labels(consumer=consumer, pod=write.pod) if consumer else {}
    )
    changes = configmaps.changed_labels(wanted, meta.get("labels") or {}) if meta else []
    if not changes:
        return
    await kube.delete_configmap(namespace=namespace, name=write.name, uid=meta.get("uid") or None)
    raise errors.LabelsRewritten(
        f"{'create' if write.create else 'patch'} ConfigMap {namespace}/{write.name}: the API "
        f"server stored other labels than the operator wrote ({', '.join(changes)}), so "
        f"neither the operator nor pod {write.pod} finds it (deleted again). A mutating "
        "admission policy or webhook rewrites them: exclude the ConfigMaps labelled "
        f"{configmaps.MANAGED_SELECTOR} from it; it must leave the labels "
        f"{configmaps.LABEL_MANAGED_BY}, {configmaps.LABEL_CONSUMER} and "
        f"{configmaps.LABEL_POD} as the operator writes them"
    )


async def create_configmap(
    kube: ports.KubePort,
    *,
    namespace: str,
    write: writes.MapWrite,
    events: Handover | None = None,
) -> Mapping[str, Any]:
    """One ConfigMap create. On a conflict, a ConfigMap the operator did not write that holds
    the name (`writes.squatter`) is reported (its Event posted, or handed to ``events``) and
    deleted (by its uid), never trusted; the conflict still fails the cycle, whose next
    attempt creates the pod's own.

    A create refused because the namespace is being deleted (`errors.NamespaceTerminating`)
    is no fault: the pod goes with the namespace, and there is nothing to fix or retry. It is
    said at DEBUG and the decision's other writes still go out; failing the cycle warned
    ``cycle failed`` and backed the consumer off, holding its hand-off timeouts up."""
    try:
        return await kube.create_configmap(namespace=namespace, body=write.body)
    except errors.NamespaceTerminating as e:
        logger.debug("not creating ConfigMap %s/%s: %s", namespace, write.name, e)
        return {}
    except errors.Conflict:
        found = await kube.read_configmap(namespace=namespace, name=write.name)
        why = writes.squatter(found, write) if found is not None else None
        if why is None or write.squat_event is None:
            raise
        event = dict(write.squat_event)
        event["message"] = f"{event.get('message', '')} ({why})"
        logger.warning("ConfigMap %s/%s: %s", namespace, write.name, event["message"])
        await _event(kube, event, events)
        uid = (found.get("metadata") or {}).get("uid") if found is not None else None
        await kube.delete_configmap(namespace=namespace, name=write.name, uid=uid or None)
        raise


async def patch_configmap(
    kube: ports.KubePort, *, namespace: str, write: writes.MapWrite
) -> Mapping[str, Any]:
    """One ConfigMap patch. One that changes the data alone is conditional on the ConfigMap's
    uid and data generation (`writes.MapWrite.data_only`), which a pod's acknowledgement
    never changes; any other is conditional on the resourceVersion, and a conflict stops the
    decision: patched again, it would set annotations over a pod's that it never read."""
    if write.data_only:
        assert write.generation is not None
        return await kube.replace_configmap_data(
            namespace=namespace,
            name=write.name,
            uid=write.uid,
            generation=write.generation,
            data={k: v for k, v in write.body["data"].items() if v is not None},
        )
    return await kube.patch_configmap(
        namespace=namespace,
        name=write.name,
        patch=write.body,
        resource_version=write.resource_version,
    )


async def _together(calls: Iterable[Awaitable[Any]]) -> None:
    """Run the calls concurrently; once all ended, raise the first failure (in call order)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def post_event(kube: ports.KubePort, body: Mapping[str, Any]) -> None:
    """Post one Event; a failure is only logged: an Event is for humans, losing one must not
    fail the cycle."""
    try:
        await kube.create_event(namespace=body["metadata"]["namespace"], body=body)
    except (errors.TransientError, errors.ConfigurationError) as e:
        logger.warning("could not post Event %s: %s", body.get("reason"), e)
