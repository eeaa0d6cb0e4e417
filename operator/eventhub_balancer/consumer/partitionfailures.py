"""The failures a Spark trigger pins on partitions, so that the failure policy counts each.

A trigger runs one handler call over every partition the pod runs, so a failure is the
trigger's unless it names its partitions: a Spark handler raises `PartitionsFailed` to name
them (exported as ``eventhub_balancer.consumer.PartitionsFailed``), and a partition named
with text only gets a `PartitionFailed` in its worker. Kept apart from ``consumer.triggers``,
which runs the triggers, because this is what a handler's own code raises.
"""

from __future__ import annotations

from collections.abc import Mapping


class PartitionFailed(Exception):
    """A partition's events failed in a trigger; raised to its worker for a named failure
    given as text."""


class PartitionsFailed(Exception):
    """Raise it from a Spark handler to say which partitions' events failed.

    ``failures`` maps a partition id to the error (an exception or its text). Those
    partitions' batches count a failed attempt under the failure policy; the trigger's other
    batches are handed to the next trigger again, without counting one.
    """

    def __init__(self, failures: Mapping[str, BaseException | str]) -> None:
        self.failures = dict(failures)
        named = ", ".join(f"{p}: {e}" for p, e in sorted(self.failures.items()))
        super().__init__(f"partitions failed: {named}")
