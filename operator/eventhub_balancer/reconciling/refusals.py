"""The decisions that touch nothing but the status: an invalid spec, and a consumer refused
for overlapping another (`conflicts`). Pure; the pods keep what they were last told.
"""

from __future__ import annotations

import dataclasses
import datetime

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions as conditiontypes
from eventhub_balancer.reconciling import (
    conflicts,
    decisions,
    kubeevents,
    observations,
    progress,
    statuses,
)


def invalid_spec(error: errors.InvalidInput) -> conditiontypes.Condition:
    message = f"spec.{error.field.removeprefix('spec.')} is invalid: {error.problem}"
    return conditiontypes.Condition(
        type=conditiontypes.READY, status="False", reason="InvalidSpec", message=message
    )


def invalid(observation: observations.Observation, *, now: datetime.datetime) -> decisions.Decision:
    """An invalid spec: say so in the Ready condition (and once in an Event), touch nothing."""
    assert observation.spec_error is not None, "an observation has a spec or a spec error"
    bad = invalid_spec(observation.spec_error)
    previous = observation.status
    generation = observation.generation
    desired = {
        "observedGeneration": generation,
        "conditions": progress.applied(
            previous.get("conditions"), [bad], observed_generation=generation, now=now
        ),
    }
    events = (
        (kubeevents.KubeEvent(reason=bad.reason, message=bad.message, type="Warning"),)
        if conditiontypes.changed(previous, bad)
        else ()
    )
    return decisions.Decision(
        generation=generation,
        status=statuses.status_patch(previous, desired),
        events=events,
        event_bodies=tuple(kubeevents.body(observation.body, e, now=now) for e in events),
        spec_error=bad.message,
        ready=bad,
        resource_version=decisions.version(observation),
    )


def refused(
    observation: observations.Observation,
    overlap: conflicts.Overlap,
    *,
    pods: frozenset[str],
    now: datetime.datetime,
) -> decisions.Decision:
    """An older EventHubConsumer of this namespace overlaps this one, or one of another
    namespace shares its unbound location, or a binding keeps the location from it
    (`conflicts`): Conflict True and Ready False, with the same message, an Event when it
    starts, and nothing else written: the pods keep what they were last told."""
    previous, generation = observation.status, observation.generation
    conflict = conflict_condition(overlap)
    ready = dataclasses.replace(conflict, type=conditiontypes.READY, status="False")
    desired = {
        "observedGeneration": generation,
        "conditions": progress.applied(
            previous.get("conditions"), [ready, conflict], observed_generation=generation, now=now
        ),
    }
    events = (
        (kubeevents.KubeEvent(reason=conflict.reason, message=conflict.message, type="Warning"),)
        if conditiontypes.changed(previous, conflict)
        else ()
    )
    return decisions.Decision(
        generation=generation,
        pods=pods,
        status=statuses.status_patch(previous, desired),
        events=events,
        event_bodies=tuple(kubeevents.body(observation.body, e, now=now) for e in events),
        ready=ready,
        resource_version=decisions.version(observation),
    )


def conflict_condition(overlap: conflicts.Overlap) -> conditiontypes.Condition:
    """The Conflict condition that refuses a consumer for ``overlap``."""
    if not overlap.others:
        message = f"this checkpoint location: {overlap.why}"
    elif overlap.reason == conflicts.REASON_SHARED:
        host = " or NS=".join(overlap.hosts) or "HOST"
        message = (
            f"{overlap.others[0].named} in another namespace {overlap.why} and holds it (it "
            "came first): this one writes nothing until it names another checkpoint "
            "container or consumer group, or the holder is deleted or moves, or an admin "
            "binds the location to the namespace it belongs to (ehb operator --bind-location "
            f"NS={host}, chart value locationBindings); the holder goes on working"
        )
    else:
        first = "was created in the same second with a lower uid, so it goes first"
        message = (
            f"{overlap.others[0].named} {overlap.why} and "
            f"{first if overlap.tied else 'is older'}: this one writes nothing until the "
            "overlap is gone (change its selector or checkpoint location, or delete one of them)"
        )
    return conditiontypes.Condition(
        type=conflicts.CONFLICT, status="True", reason=overlap.reason, message=message
    )
