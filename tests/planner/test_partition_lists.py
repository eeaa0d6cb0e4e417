"""`partitionlists`: the one way partitions are listed to a person (status, plan, pod logs,
the demo's view); it was written three times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eventhub_balancer.balancing import partitionlists


def test_runs_break_where_the_label_changes() -> None:
    epochs = {"0": 1, "1": 1, "2": 2, "3": 2, "5": 2, "x": 2}
    assert partitionlists.runs(epochs, label=lambda p: str(epochs[p])) == [
        ("0-1", "1"),
        ("2-3", "2"),
        ("5", "2"),
        ("x", "2"),
    ]


def test_epochs_are_said_once_and_folded() -> None:
    assert partitionlists.epochs([3, 3, 3]) == "epoch 3"
    assert partitionlists.epochs([5, 1, 2, 3]) == "epochs 1-3,5"
    assert partitionlists.epochs([]) == "epochs none"


def _unfolded(text: str) -> list[str]:
    out: list[str] = []
    for run in text.split(",") if text else []:
        first, _, last = run.partition("-")
        out += [str(n) for n in range(int(first), int(last) + 1)] if last else [first]
    return out


@given(st.sets(st.integers(min_value=0, max_value=1100)))
def test_compact_lists_every_partition_once_in_order(numbers: set[int]) -> None:
    ids = [str(n) for n in numbers]
    assert _unfolded(partitionlists.compact(ids)) == [str(n) for n in sorted(numbers)]


def test_named_folds_runs_and_counts_what_is_past_the_limit() -> None:
    """The operator's conditions and Events said ``0, 1, 2, 3, 4, 5, 6, 7 and 24 more`` for
    32 partitions all in the same trouble; the runs name them all: ``0-31``."""
    assert partitionlists.named([str(p) for p in range(32)], 8) == "0-31"
    assert partitionlists.named(["9", "0", "1", "2", "5", "x"], 8) == "0-2, 5, 9, x"
    every_other = [str(p) for p in range(0, 64, 2)]
    assert partitionlists.named(every_other, 3) == "0, 2, 4 and 29 more"
    assert partitionlists.named([str(p) for p in (*range(10), *range(20, 30))], 1) == (
        "0-9 and 10 more"
    )
    assert partitionlists.named([], 8) == ""


@given(st.sets(st.integers(min_value=0, max_value=1100)), st.integers(min_value=1, max_value=20))
def test_named_names_or_counts_every_partition_once(numbers: set[int], limit: int) -> None:
    ids = [str(n) for n in numbers]
    text = partitionlists.named(ids, limit)
    shown, _, more = text.partition(" and ")
    listed = _unfolded(shown.replace(", ", ","))
    counted = int(more.removesuffix(" more")) if more else 0
    assert listed == [str(n) for n in sorted(numbers)][: len(listed)]
    assert len(listed) + counted == len(numbers)
    assert len(shown.split(", ")) <= limit
