"""`ehb bench lag`'s flags and figures (its run: `tests/devstack/wire/test_json_outputs.py`)."""

from __future__ import annotations

import argparse

import pytest

from eventhub_balancer import errors
from eventhub_balancer_devstack.benchmarks import lagging
from eventhub_balancer_devstack.commands import bench_lag


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_lag.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_defaults_are_issue_38s_case() -> None:
    settings = bench_lag.settings_of(parse())
    assert settings.lag_seconds == 65.0
    assert settings.replicas == 2
    assert settings.kinds == lagging.KINDS


def test_the_kinds_are_read_from_a_comma_separated_list() -> None:
    settings = bench_lag.settings_of(parse("--kinds", " pods, configmaps "))
    assert settings.kinds == ("pods", "configmaps")


@pytest.mark.parametrize(
    ("argv", "flag", "says"),
    [
        (("--kinds", "pods,nodes"), "--kinds", "nodes"),
        (("--kinds", ","), "--kinds", "none given"),
        (("--pods", "1"), "--pods", "at least 2"),
        (("--partitions", "3", "--pods", "3"), "--partitions", "more than --pods"),
        (("--replicas", "0"), "--replicas", "at least 1"),
        (("--rounds", "0"), "--rounds", "at least 1"),
        (("--interval", "0"), "--interval", "from 1 to 3600 seconds"),
        (("--interval", "70000"), "--interval", "from 1 to 3600 seconds"),
    ],
)
def test_a_wrong_flag_is_named_with_what_to_change(
    argv: tuple[str, ...], flag: str, says: str
) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        bench_lag.settings_of(parse(*argv))
    assert caught.value.field == flag
    assert says in caught.value.problem


@pytest.mark.parametrize("raw", ["0", "-5", "nan", "inf"])
def test_a_lag_of_no_time_or_for_ever_is_refused_by_the_parser(
    raw: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse("--lag", raw)
    assert "argument --lag: " in capsys.readouterr().err


def test_the_settings_hold_a_lag_above_0_too() -> None:
    with pytest.raises(errors.InvalidInput, match="above 0"):
        lagging.Settings(lag_seconds=0)


def test_the_figures_are_the_median_and_the_worst_round_against_the_target() -> None:
    report = lagging.Report(
        settings=lagging.Settings(rounds=3), rounds_s=(3.0, 0.5, 9.25), effects={"delayed": 7}
    )
    figures = report.figures()
    assert figures["deleted_pod_reassigned_s"] == 3.0
    assert figures["deleted_pod_reassigned_max_s"] == 9.25
    assert figures["ok"] is True
    assert figures["watch_fault_effects"] == {"delayed": 7}


def test_one_round_over_the_target_makes_the_run_not_ok() -> None:
    over = lagging.TARGET_S + 0.001
    report = lagging.Report(settings=lagging.Settings(), rounds_s=(1.0, over, 1.0), effects={})
    assert report.figures()["ok"] is False


def test_settings_refuse_a_kind_no_operator_watches() -> None:
    with pytest.raises(ValueError, match="secrets"):
        lagging.Settings(kinds=("secrets",))
