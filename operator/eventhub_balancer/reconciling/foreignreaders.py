"""What the status and the Events say of an SDK processor running beside the pods.

`handlers.foreignclaims` finds one (its ownership claims rewritten in two probe intervals
running, `observations.StoreRead.foreign`); `conditions.store` then makes
CheckpointStoreReachable False with `REASON`, whose Warning Event `kubeevents` posts as it
posts any fault of the store's, once when it starts, and a Normal `REASON_GONE` when it ends
(`GONE`). Entered only while a processor is found, or right after one was.
"""

from __future__ import annotations

from typing import Final

from eventhub_balancer.contracts import conditions, specs

REASON: Final = "ForeignProcessorRunning"
REASON_GONE: Final = "ForeignProcessorStopped"
#: Where the user reads what to do.
SEE: Final = "docs/operations.md#migrating-from-eventprocessorclient-and-back"
#: Probe intervals running with a rewrite that make a processor, and without one that end it.
INTERVALS: Final = 2
GONE: Final = (
    "no other reader rewrote the SDK's ownership claims between the store's last three probes: "
    "the processor that did has stopped"
)


def message(spec: specs.ConsumerSpec, *, seen: str = "between the store's last probes") -> str:
    """What the user is told; ``seen``: when the claims were rewritten (the log names the
    partitions and the minutes; the condition names neither, so that it stands unchanged
    while the processor claims one partition after another)."""
    return (
        f"another reader on consumer group {spec.consumer_group!r} of Event Hub "
        f"{spec.event_hub_name!r} (SDK ownership claims rewritten {seen}): stop it, see "
        f"{SEE}. The pods keep their partitions; the reader's receivers are refused"
    )


def condition(spec: specs.ConsumerSpec) -> conditions.Condition:
    """CheckpointStoreReachable while an SDK processor runs on the consumer group."""
    return conditions.Condition(
        type=conditions.CHECKPOINT_STORE_REACHABLE,
        status="False",
        reason=REASON,
        message=message(spec),
    )
