"""The chart's ``podSelector`` reaches the operator as ``--pod-selector``; none by default."""

from __future__ import annotations

from pathlib import Path

from tests.install.test_chart_tenancy import operator_args


def test_by_default_the_operator_watches_every_pod() -> None:
    assert not [a for a in operator_args(None) if a.startswith("--pod-selector")]


def test_the_pod_selector_value_becomes_the_flag_whole(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        'podSelector: "app.kubernetes.io/part-of=eventhub-balancer,tier in (a, b),!legacy"\n'
    )
    assert [a for a in operator_args(values) if a.startswith("--pod-selector")] == [
        "--pod-selector=app.kubernetes.io/part-of=eventhub-balancer,tier in (a, b),!legacy"
    ]
