"""The Kubernetes Events of the partitions pods report in trouble (`reports`): a Warning
when a partition becomes failing, parked, stuck or lost (or changes from one to another), a
Normal ``PartitionRecovered`` when it is no longer reported; nothing while the troubles stay
the same. With them, the Warnings of the batches set aside into the dead letters
(`setasides`), which tell a failing partition's recovery from a batch set aside.

Apart from the moves' Events (`kubeevents`): they run only on a cycle with a trouble or a batch
set aside reported now or in the previous status (`deciding`), none on a plain pod deletion.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import failurepolicy, statusbodies
from eventhub_balancer.reconciling import kubeevents, observations, reports, setasides


def report_events(
    troubles: Mapping[models.PartitionId, reports.Trouble],
    *,
    previous: statusbodies.StatusBody,
    assignment: Mapping[models.PartitionId, models.Ownership],
    at: observations.Observation,
    maps: Mapping[str, observations.StoredMap],
    now: datetime.datetime,
) -> tuple[list[kubeevents.KubeEvent], list[setasides.SetAsideEntryBody]]:
    """The Events of the batches set aside since ``previous`` (the pods' ConfigMaps: ``maps``)
    and of the troubles' changes, of the consumer observed (``at``), and what
    ``status.deadLettered`` says now."""
    processing = at.spec.processing if at.spec is not None else None
    told = setasides.read(maps=maps, assignment=assignment)
    said = setasides.account(
        told,
        previous=previous,
        now=now,
        consumer=at.name,
        namespace=at.namespace,
        processing=processing,
    )
    events = list(said.events)
    if troubles or previous.get(reports.STATUS_FIELD):  # one may start or end
        events += trouble_events(
            troubles,
            previous=previous,
            assignment=assignment,
            processing=processing,
            told=told,
            fresh=said.fresh,
            streaming=said.streaming,
        )
    return events, said.entries


def trouble_events(
    troubles: Mapping[models.PartitionId, reports.Trouble],
    *,
    previous: statusbodies.StatusBody,
    assignment: Mapping[models.PartitionId, models.Ownership],
    processing: failurepolicy.Processing | None = None,
    told: setasides.Reading | None = None,
    fresh: Collection[tuple[str, str]] = (),
    streaming: Mapping[setasides.Key, str] = {},
) -> list[kubeevents.KubeEvent]:
    """One Warning per (state, pod) for troubles new since ``previous``, one Normal per pod for
    troubles over. A failing partition's trouble ends when its batch goes through or is set aside
    under ``onFailure: deadLetter``; a parked one's is set aside. A pod that tells what it sets
    aside (``told``) says which: ``fresh``, (partition, pod) of each batch set aside now.
    A partition ``streaming`` (setting batch after batch aside for one cause) fails and
    recovers with each batch: `setasides`' Warnings tell those, a minute apart, not a pair of
    Events a batch."""
    news = reports.changes(troubles, previous=previous)
    most = processing.max_attempts if processing and processing.on_failure == "deadLetter" else 0
    # Read by a stream, and by a recovery under deadLetter (which troubles were restarts).
    before = reports.previous_entries(previous) if streaming or most else {}

    def streams(key: tuple[str, str, int, str], error: str) -> bool:
        said = streaming.get(key[:3])
        return key[3] == "failing" and said is not None and said == setasides.cause(error)

    started: dict[tuple[str, str], list[reports.Trouble]] = {}
    for t in news.started:
        if not streams(t.key, t.error):
            started.setdefault((t.state, t.pod), []).append(t)
    events: list[kubeevents.KubeEvent] = []
    for (state, pod), group in started.items():
        parts = kubeevents.join([t.partition for t in group])
        plural = "s" if len(group) > 1 else ""
        details = reports.by_error(group)
        if state == "failing":
            text = f"{pod} keeps failing on partition{plural} {parts}, retrying with backoff"
        elif state == "parked":
            text = (
                f"{pod} parked partition{plural} {parts} at the checkpoint before the failing "
                "batch (spec.processing.onFailure: park); it stays on its pod until released "
                "(restart the pod to try again) or until onFailure is deadLetter (set aside)"
            )
        elif state == "stuck":
            text = f"a handler call on partition{plural} {parts} of {pod} runs too long"
        else:
            again = ", ".join(
                f"{t.partition} at epoch {o.epoch}"
                for t in group
                if (o := assignment.get(t.partition)) is not None
                and o.owner is not None
                and o.epoch > t.epoch
            )
            text = (
                f"{pod} lost partition{plural} {parts} at its own epoch (a higher epoch holds "
                f"it in Event Hubs or the checkpoint blob)"
                + (
                    f"; given out again: {again}"
                    if again
                    else "; given out again when a pod can, once its epoch has stood "
                    f"{reports.LOST_HOLD_SECONDS:.0f} s and its checkpoint blob can be read"
                )
            )
        said = f"{text}: {details}" if details else text
        events.append(
            kubeevents.KubeEvent(reason=reports.EVENT_REASONS[state], message=said, type="Warning")
        )
    ended: dict[str, list[tuple[str, str, int, str]]] = {}
    for key in news.ended:
        if not streams(key, str((before.get(key) or {}).get("error") or "")):
            ended.setdefault(key[1], []).append(key)
    for pod, keys in ended.items():
        plural = "s" if len(keys) > 1 else ""
        states = ", ".join(sorted({k[3] for k in keys}))
        # Taken from a pod deleted to try again (as PartitionParked says): where it is now.
        now_on = {o.owner for k in keys if (o := assignment.get(models.PartitionId(k[0])))}
        moved = sorted(str(owner) for owner in now_on - {pod} if owner)
        it, verb = ("them" if plural else "it"), ("hold" if len(moved) > 1 else "holds")
        # A worker that failed to start and started again had no batch to go through.
        batches = [k for k in keys if (before.get(k) or {}).get("restarting") is not True]
        aside, batch = "", "their batches" if len(batches) > 1 else "its batch"
        if 0 < len(batches) < len(keys):
            which = kubeevents.join([k[0] for k in batches])
            batch = f"the batch{'es' if len(batches) > 1 else ''} of {which}"
        if most and told is not None and pod in told.telling and not moved:
            aside = _which(batches, pod, fresh, batch=batch, most=most)
        elif most and any(k[3] == "failing" for k in batches):
            aside = (
                f": {batch} went through on a retry, or went to the dead letters after "
                f"spec.processing.maxAttempts ({most}) (ehb deadletters list)"
            )
        elif most and states == "parked" and not moved:  # parked under park, set aside now
            aside = f": {batch} went to the dead letters as onFailure says (ehb deadletters list)"
        named = kubeevents.join([k[0] for k in keys])
        message = (
            f"partition{plural} {named} on {pod} no longer reported in "
            f"trouble (was {states}){aside}"
            + (f"; {', '.join(moved)} {verb} {it} now" if moved else "")
        )
        events.append(kubeevents.KubeEvent(reason="PartitionRecovered", message=message))
    return events


def _which(
    keys: list[tuple[str, str, int, str]],
    pod: str,
    fresh: Collection[tuple[str, str]],
    *,
    batch: str,
    most: int,
) -> str:
    """How the troubles of ``keys`` on ``pod`` ended, as a pod that tells what it sets aside
    says: their batches went through on a retry, or went to the dead letters (``fresh``)."""
    aside = [k[0] for k in keys if (k[0], pod) in fresh]
    through = [k[0] for k in keys if (k[0], pod) not in fresh and k[3] == "failing"]
    if not aside:
        return f": {batch} went through on a retry" if through else ""
    if not through:
        why = f" after spec.processing.maxAttempts ({most})" if keys[0][3] == "failing" else ""
        return f": {batch} went to the dead letters{why} ({setasides.REASON})"
    return (
        f": the batch of {kubeevents.join(aside)} went to the dead letters ({setasides.REASON}), "
        f"that of {kubeevents.join(through)} went through on a retry"
    )
