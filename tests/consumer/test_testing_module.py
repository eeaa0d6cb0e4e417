"""``eventhub_balancer.testing`` is the handler harness under its top-level name: the same
objects as `eventhub_balancer.consumer.testing`, none left out."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from eventhub_balancer.consumer import BatchContext, Event
from eventhub_balancer.consumer import testing as harness


def _public(module: ModuleType) -> set[str]:
    """The names ``module`` defines for its users (not what it imports)."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and (getattr(value, "__module__", None) == module.__name__ or name.isupper())
    }


def test_every_name_of_the_harness_is_re_exported_as_the_same_object() -> None:
    from eventhub_balancer import testing

    assert _public(harness) <= set(testing.__all__)
    assert {"run", "run_async", "run_spark", "events", "Outcome"} <= set(testing.__all__)
    for name in testing.__all__:
        assert getattr(testing, name) is getattr(harness, name), name


def test_a_handler_test_written_against_the_top_level_module() -> None:
    """The pytest example of docs/consumer.md, as a team would write it."""
    from eventhub_balancer import testing

    totals: dict[str, int] = {}

    def process(events: Sequence[Event], context: BatchContext) -> None:
        for event in events:
            if not event.body.startswith(b"{"):
                raise ValueError(f"event {event.sequence_number} is not an order")
        totals[context.partition] = totals.get(context.partition, 0) + len(events)

    batch = testing.events([{"id": 1}, {"id": 2}], partition="3", first_sequence_number=10)
    outcome = testing.run(process, batch, epoch=4)
    assert outcome.checkpointed
    assert (outcome.context.epoch, outcome.context.last_sequence_number) == (4, 11)
    assert totals == {"3": 2}

    failed = testing.run(process, testing.events(["not json"], partition="1"))
    assert not failed.checkpointed
    assert isinstance(failed.error, ValueError)
    assert failed.failed_partitions == {"1"}
