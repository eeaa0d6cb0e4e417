"""The demo's record format and counting (pure: no stack), and the live view's rendering.

Lost and duplicate counts are the demo's headline figures; these tests pin down how a
recorded line is read back and counted, and that the view renders what it is given.
"""

from __future__ import annotations

import io
from pathlib import Path

from eventhub_balancer.local import recording, terminalviews
from eventhub_balancer.local.scenarios import running, systems


def test_runs_compress_contiguous_sequence_numbers() -> None:
    assert recording.runs([5, 1, 2, 3, 7, 8]) == [(1, 3), (5, 5), (7, 8)]
    assert recording.runs([]) == []


def test_a_line_reads_back_as_written() -> None:
    line = recording.format_line(
        at=12.5, pod="p-1", partition="3", epoch=4, sequence_numbers=[10, 11, 12, 20]
    )
    batch = recording.parse_line(line)
    assert batch is not None
    assert (batch.pod, batch.partition, batch.epoch) == ("p-1", "3", 4)
    assert list(batch.sequence_numbers()) == [10, 11, 12, 20]
    assert batch.size == 4


def test_an_incomplete_line_is_ignored() -> None:
    assert recording.parse_line("12.5 p-1 3") is None
    assert recording.parse_line("12.5 p-1 3 4 10-") is None


def test_the_reader_returns_only_complete_new_lines(tmp_path: Path) -> None:
    recording.append(tmp_path, pod="a", partition="0", epoch=1, sequence_numbers=[0, 1], at=1.0)
    reader = recording.RecordReader(tmp_path)
    assert [b.size for b in reader.read_new()] == [2]
    with (tmp_path / "a.rec").open("a") as f:
        f.write("2.0 a 0 1 2-3")  # a writer caught mid-line
    assert reader.read_new() == []
    with (tmp_path / "a.rec").open("a") as f:
        f.write("\n")
    assert [list(b.sequence_numbers()) for b in reader.read_new()] == [[2, 3]]


def test_tally_counts_duplicates_and_missing_events() -> None:
    tally = recording.Tally()
    first = recording.Batch(at=1.0, pod="a", partition="0", epoch=1, spans=((0, 4),))
    again = recording.Batch(at=2.0, pod="b", partition="0", epoch=2, spans=((3, 6),))
    tally.add([first, again])
    assert tally.processed == 7
    assert tally.duplicates == 2
    assert [n for _, _, n in tally.repeats] == [3, 4]
    assert tally.missing({"0": 9, "1": 1}) == [("0", 7), ("0", 8), ("1", 0)]


def test_judge_needs_even_counts_ready_members_and_nothing_in_flight() -> None:
    members = ("a", "b")
    ready = frozenset(members)
    even = {"0": "a", "1": "a", "2": "b"}
    assert systems.judge(
        partitions=["0", "1", "2"], members=members, ready=ready, owners=even, in_flight=0
    ).balanced
    uneven = {"0": "a", "1": "a", "2": "a"}
    assert not systems.judge(
        partitions=["0", "1", "2"], members=members, ready=ready, owners=uneven, in_flight=0
    ).balanced
    assert not systems.judge(
        partitions=["0", "1", "2"], members=members, ready=ready, owners=even, in_flight=1
    ).balanced
    assert not systems.judge(
        partitions=["0", "1", "2"],
        members=members,
        ready=frozenset({"a"}),
        owners=even,
        in_flight=0,
    ).balanced
    assert not systems.judge(
        partitions=["0", "1", "2"],
        members=members,
        ready=ready,
        owners=even,
        in_flight=0,
        pending=["b"],
    ).balanced


def _progress(phase: str) -> running.Progress:
    snapshot = systems.judge(
        partitions=["0", "1", "2", "3"],
        members=("p-a", "p-b"),
        ready=frozenset({"p-a", "p-b"}),
        owners={"0": "p-a", "1": "p-a", "2": "p-b", "3": "p-b"},
        in_flight=0,
    )
    steps = running.standard_steps(partitions=4, grow_to=6)
    return running.Progress(
        label="ours",
        step_index=1,
        steps=steps,
        phase=phase,
        elapsed_s=12.0,
        step_elapsed_s=1.5,
        snapshot=snapshot,
        pods=(
            running.PodView(
                name="p-a",
                ready=True,
                restarts=0,
                partitions=("0", "1"),
                lag=3,
                events_per_s=50.0,
            ),
            running.PodView(
                name="p-b",
                ready=False,
                restarts=1,
                partitions=("2", "3"),
                lag=0,
                events_per_s=0.0,
            ),
        ),
        produced=100,
        processed=97,
        duplicates=0,
        lag=3,
        events_per_s=50.0,
        results=(),
    )


def test_the_frame_shows_pods_partitions_and_the_step() -> None:
    text = "\n".join(terminalviews.frame(_progress("balancing")))
    for shown in ("p-a", "0-1", "2-3"):
        assert shown in text
    assert "step 2/6 scale 2 -> 6: balancing 1.5 s" in text
    assert "hand-offs in flight 0" in text


def test_without_a_terminal_one_line_per_step_and_no_escapes() -> None:
    out = io.StringIO()
    view = terminalviews.LiveView(out, tty=False)
    view(_progress("balancing"))
    view(_progress("balancing"))
    assert out.getvalue().count("\n") == 1
    assert "\x1b" not in out.getvalue()


def test_compact_partition_lists() -> None:
    assert terminalviews.compact(["0", "1", "2", "5", "7", "8"]) == "0-2,5,7-8"
    assert terminalviews.compact([]) == "-"
