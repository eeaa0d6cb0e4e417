"""metav1.Condition bookkeeping for the EventHubConsumer status, pure.

Conditions are a list keyed by ``type`` (Kubernetes API conventions). ``lastTransitionTime``
moves only when ``status`` changes, so that a steady state rewrites nothing and a reader can
tell for how long something has been true; reason, message and observedGeneration follow the
latest cycle.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence
from typing import Literal

from eventhub_balancer.contracts import statusbodies, timestamps

Status = Literal["True", "False", "Unknown"]

READY = "Ready"
BALANCED = "Balanced"
EVENTHUB_REACHABLE = "EventHubReachable"
CHECKPOINT_STORE_REACHABLE = "CheckpointStoreReachable"
#: True while a pod reports one of its partitions failing, parked, stuck or lost
#: (`contracts.partitionreports`): the partition's trouble, not the pod's or the consumer's.
PARTITIONS_FAILING = "PartitionsFailing"
#: True once spec.paused is true and no pod holds or is releasing a partition: only then may
#: checkpoints be reset (nothing can write them but the reset). False while hand-offs of a
#: pause are in flight (reason Pausing) and after a resume (reason Resumed).
PAUSED = "Paused"
#: The reasons of a dependency's fault (EventHubReachable, CheckpointStoreReachable) that
#: stop the pods as well as the operator: what the spec names does not exist, or its Secret
#: holds nothing that can work. Ready is False while one stands; a fault that may pass (an
#: unreachable endpoint) leaves Ready to the pods, which keep processing meanwhile.
CANNOT_PROCESS = frozenset(
    {
        "ConsumerGroupNotFound",
        "EventHubNotFound",
        "EventHubAuthenticationFailed",
        "EventHubMisconfigured",
        "SecretNotFound",
        "CheckpointStoreMisconfigured",
    }
)
#: The longest message a condition carries: readable in ``kubectl describe`` and far below
#: the API's limit (32 KiB).
MAX_MESSAGE = 1000
#: What ends a message `shorten` had to cut.
CUT = " …"
#: The most of a message `shorten` drops to cut between words: a longer word (a URL, a path,
#: a blob name) is cut inside, and the message keeps what fits of it.
WORD_BACKOFF = 30
#: The order in the status: Ready first, as the conventions ask.
ORDER = (
    READY,
    BALANCED,
    EVENTHUB_REACHABLE,
    CHECKPOINT_STORE_REACHABLE,
    PARTITIONS_FAILING,
    PAUSED,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Condition:
    """The desired state of one condition, as a cycle concludes it."""

    type: str
    status: Status
    reason: str
    message: str


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` in at most ``limit`` characters, cut between words and marked as cut; inside
    the word at the cut when going back to its start would drop more than `WORD_BACKOFF`."""
    if len(text) <= limit:
        return text
    room = max(0, limit - len(CUT))
    head = text[:room]
    space = head.rfind(" ")
    if space > 0 and not text[room].isspace() and room - space <= WORD_BACKOFF:
        head = head[:space]
    return head.rstrip(" ;,:(") + CUT


def amount(count: int, noun: str) -> str:
    """``1 partition``, ``2 partitions``: a count and its noun agreeing."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def counted(count: int, noun: str, verb: str, verb_for_many: str) -> str:
    """``1 pod matches``, ``2 pods match``: a count with its noun and verb agreeing."""
    return f"{count} {noun} {verb}" if count == 1 else f"{count} {noun}s {verb_for_many}"


def every(count: int, noun: str, verb: str, verb_for_many: str) -> str:
    """``all 4 partitions are``, or ``the only partition is`` when there is one."""
    return f"the only {noun} {verb}" if count == 1 else f"all {count} {noun}s {verb_for_many}"


def apply(
    current: Sequence[statusbodies.ConditionBody] | None,
    updates: Iterable[Condition],
    *,
    observed_generation: int,
    now: datetime.datetime,
) -> list[statusbodies.ConditionBody]:
    """The conditions list after ``updates``; types not updated are kept as they were."""
    by_type: dict[str, statusbodies.ConditionBody] = {
        c["type"]: c for c in (current or []) if isinstance(c, dict) and "type" in c
    }
    for update in updates:
        old = by_type.get(update.type)
        transition = timestamps.format_time(now)
        if old is not None and old.get("status") == update.status and old.get("lastTransitionTime"):
            transition = old["lastTransitionTime"]
        by_type[update.type] = {
            "type": update.type,
            "status": update.status,
            "observedGeneration": observed_generation,
            "lastTransitionTime": transition,
            "reason": update.reason,
            "message": update.message,
        }
    ordered = [by_type.pop(t) for t in ORDER if t in by_type]
    return ordered + [by_type[t] for t in sorted(by_type)]


def find(
    conditions: Sequence[statusbodies.ConditionBody] | None, type_: str
) -> statusbodies.ConditionBody | None:
    for condition in conditions or []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return None


def changed(previous: statusbodies.StatusBody, c: Condition) -> bool:
    """Whether ``c`` differs in status or reason from the same condition in ``previous``."""
    old = find(previous.get("conditions"), c.type)
    return old is None or old.get("status") != c.status or old.get("reason") != c.reason


def was_false(previous: statusbodies.StatusBody, c: Condition) -> bool:
    old = find(previous.get("conditions"), c.type)
    return old is not None and old.get("status") == "False"
