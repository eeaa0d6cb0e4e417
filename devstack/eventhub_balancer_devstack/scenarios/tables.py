"""A scenario's summary as text: the per-step table printed on terminals."""

from __future__ import annotations

from collections.abc import Sequence

from eventhub_balancer_devstack.scenarios.models import StepSummary


def format_steps(results: Sequence[StepSummary]) -> list[str]:
    """The per-step table of a summary, for terminals."""

    def seconds(value: float | None, missing: str) -> str:
        return missing if value is None else f"{value:.2f} s"

    lines = [
        f"{'step':<28} {'pods up':>8} {'balanced':>9} {'end to end':>10} {'failover':>9} "
        f"{'moved':>6} {'dup':>5} {'lost':>5}"
    ]
    for r in results:
        failover = "-" if r["pod"] is None else seconds(r["failover_s"], "timeout")
        lines.append(
            f"{r['step']:<28} {seconds(r['pods_up_s'], 'timeout'):>8} "
            f"{seconds(r['balanced_s'], 'timeout'):>9} {seconds(r['end_to_end_s'], 'timeout'):>10} "
            f"{failover:>9} {r['moved']:>6} {r['duplicates']:>5} {r['lost']:>5}"
        )
    return lines
