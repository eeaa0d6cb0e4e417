"""The demo's closing line: what went wrong, or that it did what it shows."""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.commands import demo


def step(name: str, kind: str, *, balanced: float | None = 0.3, duplicates: int = 0) -> Any:
    return {
        "step": name,
        "kind": kind,
        "balanced_s": balanced,
        "end_to_end_s": balanced,
        "pods_up_s": 0.0,
        "failover_s": None,
        "pod": None,
        "moved": 4,
        "duplicates": duplicates,
        "lost": 0,
    }


def summary(*steps: Any, lost: int = 0) -> Any:
    return {
        "produced": 100,
        "processed": 100 - lost,
        "lost": lost,
        "duplicates": 0,
        "steps": list(steps),
    }


def test_a_clean_run_has_nothing_to_say() -> None:
    assert (
        demo.verdict(
            summary(step("scale 2 -> 6", "scale-out"), step("SIGKILL a pod", "kill", duplicates=3))
        )
        == []
    )


def test_each_failure_is_named() -> None:
    problems = demo.verdict(
        summary(
            step("scale 2 -> 6", "scale-out", duplicates=2),
            step("delete a pod", "delete", balanced=None),
            lost=5,
        )
    )
    assert problems == [
        "delete a pod was not balanced in time",
        "5 events lost",
        "2 duplicates on planned steps",
    ]
