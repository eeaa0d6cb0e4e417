"""A status written back to an earlier time by someone else, and the operator's own put back. Pure.

``status.epochs`` never goes down by the operator's writes: it keeps every epoch ever given out.
A status whose epochs are below those of the status the operator read before, on the same
EventHubConsumer (its uid), was written by someone else: a backup restored, ``kubectl apply
--server-side --subresource=status`` of a ``status:`` block kept in git, a hand edit. Believed,
it would undo the hand-offs made since: partitions taken back from the pods that run them and
given again at epochs already given out, their ConfigMaps reported as tampered with.

The operator decides over the status it read before instead (`restored`), and writes it back
over the one found (`put_back`), with one Warning Event ``StatusRolledBack``. It knows that
status only while it runs: an operator started after such a write reads the status it finds,
unless the status names another object than the one it is on (`decisions.own`).
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Mapping
from typing import Any

from eventhub_balancer.contracts import bounds, specs, statusbodies
from eventhub_balancer.reconciling import decisions, kubeevents, observations

#: The reason of the Warning Event that says a status was put back.
REASON = "StatusRolledBack"
#: The partitions an Event names, at most.
NAMED = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class Restored:
    """The status the operator decides over (its own, read before) and the one it found."""

    found: statusbodies.StatusBody
    event: kubeevents.KubeEvent


def _epochs(status: statusbodies.StatusBody) -> dict[str, int]:
    raw: Mapping[str, Any] = status.get("epochs") or {}
    return {str(p): e for p, e in raw.items() if bounds.is_epoch(e)}


def _version(body: specs.ConsumerBody) -> int | None:
    raw = str((body.get("metadata") or {}).get("resourceVersion") or "")
    return int(raw) if raw.isdigit() else None


def lowered(before: specs.ConsumerBody, after: specs.ConsumerBody) -> dict[str, tuple[int, int]]:
    """The partitions whose ``status.epochs`` went down from ``before`` to ``after``, a later
    version of the same object: {partition: (was, now)}, ``now`` 0 where it is gone."""
    meta_before, meta_after = before.get("metadata") or {}, after.get("metadata") or {}
    if not meta_before.get("uid") or meta_before.get("uid") != meta_after.get("uid"):
        return {}
    old, new = _version(before), _version(after)
    if old is None or new is None or new <= old:
        return {}  # not a later version (a stale read is refused by the write's precondition)
    now = _epochs(after.get("status") or {})
    return {
        p: (e, now.get(p, 0))
        for p, e in _epochs(before.get("status") or {}).items()
        if now.get(p, 0) < e
    }


def remember(carry: decisions.Carry, body: specs.ConsumerBody) -> decisions.Carry:
    """``carry`` with the status the operator wrote (``body``, its write's answer) as the one
    read before: a status written back to before that write is told from it."""
    return dataclasses.replace(carry, record=decisions.read_record(carry.record, body))


def restored(
    remembered: decisions.RecordRead | None, observation: observations.Observation
) -> tuple[observations.Observation, Restored | None]:
    """``observation`` with the status read before in place of a status rolled back since
    (its metadata as found: the write that puts it back is conditioned on it), and what was
    found; ``observation`` itself and None when nothing went back."""
    if remembered is None:
        return observation, None
    went = lowered(remembered.body, observation.body)
    if not went:
        return observation, None
    named = sorted(went, key=lambda p: (len(p), p))
    words = ", ".join(f"{p} ({went[p][0]} -> {went[p][1]})" for p in named[:NAMED])
    if len(named) > NAMED:
        words += f" and {len(named) - NAMED} more"
    event = kubeevents.KubeEvent(
        reason=REASON,
        type="Warning",
        message=(
            f"status.epochs went back for partitions {words}: someone wrote an earlier status "
            "(a restore, or an apply of status); the operator's status is written back and "
            "no partition moves. Keep status out of what you apply."
        ),
    )
    found = observation.status
    status = remembered.body.get("status") or {}
    body = typing.cast(specs.ConsumerBody, {**observation.body, "status": status})
    return dataclasses.replace(observation, body=body), Restored(found=found, event=event)


def put_back(
    decision: decisions.Decision,
    restoring: Restored,
    *,
    remembered: statusbodies.StatusBody,
    consumer: specs.ConsumerBody,
    now: datetime.datetime,
) -> decisions.Decision:
    """``decision`` (taken over ``remembered``) with a status patch from the status found to
    the one it wants, and the Event that says so. An epoch the status found holds higher
    stays (epochs never go down, whoever raised them)."""
    wanted: dict[str, Any] = {**remembered, **decision.status}
    epochs = dict(decision.epochs) if decision.epochs is not None else _epochs(remembered)
    for p, e in _epochs(restoring.found).items():
        epochs[p] = max(e, epochs.get(p, 0))
    wanted["epochs"] = epochs
    if decision.record is not None:
        wanted["assignment"] = [dict(entry) for entry in decision.record]
    patch = {k: v for k, v in wanted.items() if restoring.found.get(k) != v}
    return dataclasses.replace(
        decision,
        status=patch,
        events=(*decision.events, restoring.event),
        event_bodies=(
            *decision.event_bodies,
            kubeevents.body(consumer, restoring.event, now=now),
        ),
        settled_until=None,
    )
