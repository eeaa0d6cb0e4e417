"""``ehb status``'s table, and its hint when no operator serves the consumer's namespace."""

from __future__ import annotations

from typing import Any

from eventhub_balancer.cli import status


def consumer(generation: int = 1, **status_fields: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "shop", "name": "orders", "generation": generation},
        "status": status_fields,
    }


def test_no_status_says_which_operator_is_missing_instead_of_question_marks() -> None:
    shown = status.render(consumer())
    assert "? partitions" not in shown
    assert shown.startswith("shop/orders: no status yet: no operator has reconciled it; ")
    assert "is an operator running that serves namespace shop?" in shown
    assert "ehb operator -n shop" in shown


def test_a_status_of_an_older_generation_is_said_above_the_table() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "AllPartitionsOwned", "message": "ok"}
    shown = status.render(
        consumer(generation=3, observedGeneration=2, partitionCount=4, conditions=[ready])
    ).splitlines()
    assert shown[0].startswith("shop/orders: the status is of generation 2, the spec is at 3")
    assert shown[1].startswith("shop/orders: 4 partitions, ")


def test_a_current_status_has_no_hint() -> None:
    shown = status.render(
        consumer(observedGeneration=1, partitionCount=4, memberCount=2, movesTotal=4)
    )
    assert shown.splitlines()[0] == "shop/orders: 4 partitions, 2 members, 4 moves"
    assert status.unserved(consumer(observedGeneration=1)) is None
