"""One cycle's whole decision: `decide(observation, carry, now=...)` -> (`decisions.Decision`,
`decisions.Carry`).

From what was read (`observations.Observation`) to everything there is to write: the epochs
for status (written first), the ConfigMap and pod writes (`writes`), the rest of the status
and the metrics (`statuses`), the Events (`kubeevents`) and when to come back (``next_in``,
`deadlines`). The steps, in order: advance the consumer's fleet (`fleets`: the pods and
ConfigMaps read again only where they are new objects), read the assignment back
(`readbacks`), decide the partition list, plan (`balancing.planning`), derive the writes
(`writes`), conclude the conditions (`conditions`).

What one decision hands the next of the same consumer is its `decisions.Carry`, a frozen
value the caller keeps (`handlers.memories.Memory`) and passes back in: the fleet it read, the
record it read from the status, and the writes of a decision the cycle takes again with the
blobs. Nothing here keeps anything between calls: the same observation, carry and time give
the same decision and carry, and an empty carry (None) the same decision as a warm one.

Reading the checkpoint blobs costs a listing of the container, so the first decision is
taken without them; when it gives a partition a new owner (the blobs' epochs are a floor for
the new epoch) or weighs by lag, it says ``needs_checkpoints`` and the cycle decides again
with the blobs in the observation. Deciding twice is safe: the same observation always gives
the same decision.

A decision that writes nothing and reads nothing more says until when it stands
(``settled_until``): over the same observation, nothing but the deadlines it names changes it.
The cycle skips deciding while its inputs have not changed and that moment has not come
(`deadlines.stands`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import bounds, configmaps, partitionreports, podstates, specs
from eventhub_balancer.contracts import conditions as conditiontypes
from eventhub_balancer.reconciling import (
    conditions,
    conflicts,
    coordinates,
    deadlines,
    decisions,
    fleets,
    kubeevents,
    observations,
    progress,
    readbacks,
    refusals,
    reports,
    rollbacks,
    setasides,
    silentowners,
    statuses,
    troubleevents,
)


def decide(
    observation: observations.Observation, carry: decisions.Carry | None, *, now: datetime.datetime
) -> tuple[decisions.Decision, decisions.Carry]:
    """The decision of one cycle over ``observation`` at ``now``, and what the next decision
    of this consumer takes as its ``carry`` (None or `decisions.COLD`: nothing carried)."""
    carry = carry if carry is not None else decisions.COLD
    if observation.spec is None:
        return refusals.invalid(observation, now=now), carry
    spec = observation.spec
    fleet = fleets.advance(
        carry.fleet,
        scope=fleets.scope_of(observation.namespace, observation.name, spec.selector),
        pods=observation.pods,
        configmaps=observation.configmaps,
        selector=spec.selector,
        consumer=observation.name,
        sightings=observation.sightings,
    )
    # A status someone wrote back to an earlier time: decided over the one read before.
    restoring = None
    if carry.record is not None and carry.record.body is not observation.body:
        observation, restoring = rollbacks.restored(carry.record, observation)
    recorded = decisions.read_record(carry.record, observation.body)
    # While the status found is rolled back, the carry keeps the operator's own record, so
    # the next decision (this cycle's second, or the next cycle's) puts it back too. The
    # record just read would make the status found the operator's from then on.
    kept = carry.record if restoring is not None else recorded
    unknown = readbacks.unconfirmed(
        fleet,
        recorded.recorded,
        observation.departures,
        record_version=int(recorded.resource_version)
        if recorded.resource_version.isdigit()
        else None,
    )
    owing, confirm_at = readbacks.unacknowledged(
        fleet, observation.departures, wall=podstates.to_seconds(now)
    )
    if unknown or owing:
        # Nothing is written until the pods say whether those are gone.
        held = decisions.Decision(
            generation=observation.generation,
            pods=fleet.concerned() | unknown,
            needs_pods=True,
            next_in=readbacks.CONFIRM_SECONDS,
            resource_version=decisions.version(observation),
        )
        return held, decisions.Carry(fleet=fleet, record=kept, derived=carry.derived)
    decision, derived = _decide(
        observation,
        spec=spec,
        fleet=fleet,
        recorded=recorded,
        derived=carry.derived,
        now=now,
        confirm_at=confirm_at,
    )
    if restoring is not None:
        decision = rollbacks.put_back(
            decision, restoring, remembered=observation.status, consumer=observation.body, now=now
        )
    if not (decision.needs_checkpoints or decision.needs_last_sequences):
        derived = None  # only the first of a cycle's two decisions hands its writes on
    if fleet is carry.fleet and kept is carry.record and derived is carry.derived:
        return decision, carry
    return decision, decisions.Carry(fleet=fleet, record=kept, derived=derived)


def _decide(
    observation: observations.Observation,
    *,
    spec: specs.ConsumerSpec,
    fleet: fleets.Fleet,
    recorded: decisions.RecordRead,
    derived: decisions.Derived | None,
    now: datetime.datetime,
    confirm_at: tuple[float, ...] = (),
) -> tuple[decisions.Decision, decisions.Derived | None]:
    """The decision, and the writes to carry on: those it derived, or ``derived`` as it came
    when it derived none. ``confirm_at``: when a pod's silence about its ConfigMap comes due
    (`readbacks.unacknowledged`): the decision comes back then."""
    wall = podstates.to_seconds(now)
    states = fleet.states
    me = conflicts.peer(
        observation.body, spec=spec, namespace=observation.namespace, name=observation.name
    )
    overlap = conflicts.find(
        me, observation.peers, pod_labels=fleet.pod_labels(), bindings=observation.bindings
    )
    if overlap is not None:
        return refusals.refused(observation, overlap, pods=frozenset(states), now=now), derived
    maps = fleet.stored_maps()
    # A status written for another object (a restore): its epochs a floor, its record none.
    previous, restored = decisions.own(observation.body)
    status_epochs = {
        str(k): v for k, v in (previous.get("epochs") or {}).items() if bounds.is_epoch(v)
    }
    floors = {p: e for p, e in restored.items() if bounds.is_epoch(e)}
    for p, (epoch, _seq) in (observation.store.checkpoints or {}).items():
        floors[p] = max(floors.get(p, 0), epoch)
    back = readbacks.read_back(
        maps=maps,
        pods=states,
        status=previous,
        stored_epochs=floors,
        now=now,
        fleet=fleet,
        recorded=recorded.recorded,
        blobs_unreadable=observation.store.checkpoints is None
        and observation.store.fault is not None,
    )
    # New coordinates: the pods' partitions get higher epochs, in the record first.
    moving = coordinates.change(spec=spec, maps=maps, pods=states, assignment=back.assignment)
    if moving.raised:
        back = dataclasses.replace(back, assignment=moving.apply(back.assignment))
    listed = observation.hub.ids if observation.hub.fault is None else None
    partitions, unlisted = readbacks.planned_partitions(
        observation.hub.ids, back, gone=moving.hub_changed and listed is not None
    )
    options = spec.balancing.to_options()
    members = fleet.members
    if spec.paused:
        members = progress.paused_members(members, now=wall, options=options)
    lag = observation.lag()
    plan = planning.plan(
        models.Scenario(
            partitions=partitions,
            members=members,
            assignment=back.assignment,
            released=back.released,
            lag=lag,
            rates=observation.rates,
            idle=fleet.idle(back.assignment),
            now=wall,
            options=options,
        )
    )
    troubles = reports.standing(back.troubles, plan.assignment)
    by_lag = options.weighting == "lag"
    gives_out = any(m.kind != "revoke" and m.target is not None for m in plan.moves)
    unread = observation.store.checkpoints is None
    hub_ok = observation.hub.fault is None

    # Every epoch ever given out stays, whatever a listing says (a partition count never
    # shrinks, and a partition left behind by another hub may come back).
    new_epochs = statuses.epochs(plan.assignment, back.floors, status_epochs)
    raises = any(new_epochs.get(p, 0) > status_epochs.get(p, 0) for p in new_epochs)
    if raises:
        previous = {**previous, "epochs": new_epochs}
    derived = decisions.derive(
        derived,
        fleet=fleet,
        spec=spec,
        consumer=observation.name,
        namespace=observation.namespace,
        assignment=plan.assignment,
        problems=back.problems,
        annotate_pods=observation.annotate_pods,
    )
    planned = kubeevents.with_squat_events(derived.writes, observation.body, now=now)
    silent = silences(current=fleet.current, assignment=plan.assignment, pods=states, wall=wall)
    concluded = conditions.build(
        plan=plan,
        pods=states,
        partitions=partitions,
        hub=conditions.hub(observation.hub, spec=spec, assigned=bool(partitions)),
        store=conditions.store(
            observation.store, spec=spec, ignored=back.ignored, leaps=back.epoch_leaps
        ),
        spec=spec,
        troubles=troubles,
        previous=previous,
        ready_count=fleet.ready,
        pod_scope=observation.pod_scope,
        silent=silent,
        refused=observation.refused,
    )
    concluded = progress.at_zero(
        concluded,
        assignment=plan.assignment,
        previous=previous,
        generation=observation.generation,
        backlog=sum(lag.values()) if lag and not unread else None,
        selector=spec.selector.to_query(),
    )
    concluded += conditions.conflict_cleared(previous)
    events = kubeevents.build(
        plan=plan,
        problems=back.problems,
        planned=planned,
        concluded=concluded,
        previous=previous,
        tampered=back.tampered,
        paused=spec.paused,
        pods=states,
        left=observation.departures.left,
        now=wall,
    )
    told: list[setasides.SetAsideEntryBody] = []  # a trouble or a batch set aside is news
    news = troubles or any(previous.get(f) for f in (reports.STATUS_FIELD, setasides.STATUS_FIELD))
    if news or any(partitionreports.sets_aside(cm.annotations) for cm in fleet.current.values()):
        more, told = troubleevents.report_events(
            troubles,
            previous=previous,
            assignment=plan.assignment,
            at=observation,
            maps=fleet.current,
            now=now,
        )
        events += more
    outcome = statuses.Outcome(
        generation=observation.generation,
        partitions=partitions,
        pods=states,
        assignment=plan.assignment,
        floors=back.floors,
        owner_changes=sum(1 for m in plan.moves if m.kind != "revoke" and m.target is not None),
        balanced=plan.balanced,
        grace_seconds=float(spec.balancing.pod_grace_seconds),
        conditions=tuple(concluded),
        troubles=troubles,
        member_count=statuses.member_count(
            states,
            now=wall,
            grace=float(spec.balancing.pod_grace_seconds),
            ready=fleet.ready,
            notready=fleet.notready,
        ),
        epochs=new_epochs,
    )
    desired = statuses.build_status(outcome=outcome, previous=previous, now=now)
    if recorded.uid:  # the status says which object it was written for (`decisions.own`)
        desired[decisions.UID_FIELD] = recorded.uid
    if told or previous.get(setasides.STATUS_FIELD):  # written while any, [] to clear it
        desired[setasides.STATUS_FIELD] = told
    if (moved := moving.event()) is not None:
        events.append(moved)
    record = desired.get("assignment") if raises else None
    if record is not None:
        previous = {**previous, "assignment": record}
    figures = statuses.build_figures(
        plan=plan,
        before=back,
        wall=wall,
        partitions=partitions,
        hub_ok=hub_ok,
        # A backlog only from checkpoints read now: weighting by lag plans on from the last
        # ones while the store is down, but the hub's end grows past them, and that is no
        # backlog to scale on (the figure holds, `metrics.Metrics.set_recommended`).
        lag=lag if not unread else None,
        paused=spec.paused,
        # Paused, no pod is a live member: the pods that run are what the figure keeps.
        members=outcome.member_count if spec.paused else None,
    )
    decision = decisions.Decision(
        generation=observation.generation,
        pods=fleet.concerned(),
        needs_checkpoints=unread and (gives_out or by_lag or bool(moving.raised)),
        needs_last_sequences=by_lag and hub_ok and observation.last_sequences is None,
        epochs=new_epochs if raises else None,
        record=record,
        writes=planned,
        status=statuses.status_patch(previous, desired),
        events=tuple(events),
        event_bodies=tuple(kubeevents.body(observation.body, e, now=now) for e in events),
        partitions=partitions,
        moves=plan.moves,
        balanced=plan.balanced,
        awaits_release=bool(plan.release_deadlines) or figures.handoffs_in_flight > 0,
        unlisted=unlisted,
        figures=figures,
        ready=next((c for c in concluded if c.type == conditiontypes.READY), None),
        next_in=deadlines.next_in(
            plan=plan,
            pods=states,
            notready=fleet.notready,
            spec=spec,
            wall=wall,
            held=(*back.lost_held.values(), *confirm_at, *silent.due),
        ),
    )
    quiet = (
        decision.epochs is None
        and decision.writes.count == 0
        and not decision.status
        and not decision.events
        and not decision.needs_checkpoints
        and not decision.needs_last_sequences
    )
    until = deadlines.settled_until(
        quiet=quiet,
        plan=plan,
        pods=states,
        notready=fleet.notready,
        spec=spec,
        wall=wall,
        held=(*back.lost_held.values(), *confirm_at, *silent.due),
    )
    return dataclasses.replace(
        decision, settled_until=until, resource_version=decisions.version(observation)
    ), derived


def silences(
    *,
    current: Mapping[str, observations.StoredMap],
    assignment: Mapping[models.PartitionId, models.Ownership],
    pods: Mapping[str, podstates.PodState],
    wall: float,
) -> silentowners.Silences:
    """The Ready owners of ``assignment`` (the plan) that have no ConfigMap in ``current`` (each
    pod's) since they were given their first partition, or never applied the one they have."""
    held: dict[str, int] = {}
    given: dict[str, float] = {}  # the earliest moment each owner was given what it holds
    for o in assignment.values():
        if o.owner is not None:
            held[o.owner] = held.get(o.owner, 0) + 1
            given[o.owner] = min(given.get(o.owner, o.since), o.since)
    unwritten: dict[str, int] = {}
    unapplied: dict[str, int] = {}
    due: list[float] = []
    for pod in sorted(held, key=models.name_key):
        state = pods.get(pod)
        if state is None or not state.ready:
            continue
        cm = current.get(pod)
        if cm is None:
            found, since = unwritten, given[pod]
        elif configmaps.parse_applied_generation(cm.annotations) is None:
            times = [e.since for e in cm.parsed.partitions.values() if e.since is not None]
            if not times:
                continue
            found, since = unapplied, podstates.to_seconds(min(times))
        else:
            continue
        if wall >= since + silentowners.UNAPPLIED_SECONDS:
            found[pod] = held[pod]
        else:
            due.append(since + silentowners.UNAPPLIED_SECONDS)
    return silentowners.Silences(unwritten=unwritten, unapplied=unapplied, due=tuple(due))
