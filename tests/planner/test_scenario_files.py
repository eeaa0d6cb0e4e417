"""Every scenario file under tests/planner/scenarios/ plans to exactly its expected output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventhub_balancer.balancing import planning, scenarios
from tests.support import paths

SCENARIOS = paths.SCENARIOS
INPUTS = sorted(p for p in SCENARIOS.glob("*.json") if not p.name.endswith(".expected.json"))


def test_there_are_scenario_files_and_each_has_an_expected_output() -> None:
    assert len(INPUTS) >= 10
    for path in INPUTS:
        assert path.with_suffix(".expected.json").is_file(), f"{path.name} has no expected output"


@pytest.mark.parametrize("path", INPUTS, ids=[p.stem for p in INPUTS])
def test_a_scenario_file_plans_to_its_expected_output(path: Path) -> None:
    plan = planning.plan(scenarios.load(path.read_text()))
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    assert scenarios.dump_plan(plan) == expected
