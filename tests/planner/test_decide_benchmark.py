"""`ehb bench decide` measures what it says: a settled fleet decided cold, and with the carry
of the decision before it with one pod flipped per decision."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer import cli
from eventhub_balancer.reconciling import deciding, fleets
from eventhub_balancer_devstack.benchmarks import deciding as bench


def test_the_fleet_settles_with_every_partition_owned_and_nothing_left_to_write() -> None:
    observation, carry, second = bench.settled(16, 4)
    decision, _ = deciding.decide(observation, carry, now=bench.at(second))
    assert decision.writes.count == 0
    assert not decision.status
    assert decision.balanced
    owned = {e["partition"] for e in observation.body["status"]["assignment"]}  # type: ignore[typeddict-item]
    assert owned == {str(p) for p in range(16)}


def test_each_warm_decision_reads_the_flipped_pod_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    read_pod = fleets.read_pod

    def counted(body: Any, **options: Any) -> fleets.PodRead:
        read.append(body["metadata"]["name"])
        return read_pod(body, **options)

    monkeypatch.setattr(fleets, "read_pod", counted)
    figure = bench.measure(16, 4, repeat=3)
    # The cold decisions read every pod; each warm one the flipped pod alone.
    assert read[-3:] == ["pod-1"] * 3
    assert read[-7:-3] == ["pod-0", "pod-1", "pod-2", "pod-3"]
    assert figure["cold_ms"] > 0
    assert figure["partitions"] == 16
    assert figure["pods"] == 4
    assert figure["decide_ms"] >= figure["planner_ms"] > 0
    assert figure["outside_planner_ms"] == pytest.approx(
        figure["decide_ms"] - figure["planner_ms"], abs=0.002
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeat", "0"], "--repeat: must be at least 1"),
        (["--partitions", "8"], "give --partitions and --pods together"),
        (["--partitions", "0", "--pods", "1"], "partitions and pods must be at least 1"),
    ],
)
def test_bad_settings_are_refused_with_what_to_change(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "decide", *argv]) == 2
    assert message in capsys.readouterr().err
