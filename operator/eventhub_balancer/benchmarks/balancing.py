"""Side by side: the SDK's own balancing against eventhub-balancer, the same scenario twice.

The project's claim (DESIGN.md, "Why it exists") is that central balancing with ordered
hand-offs balances an order of magnitude faster than the SDK's lease race, fails over in
seconds instead of an ownership expiry, and duplicates nothing on planned moves. This
benchmark runs the demo's scenario (`scenarios.running.standard_steps`) once with SDK
EventProcessorClient workers (`sdkbalancing`) and once with the operator and our consumer
runtime, on the same emulator and Azurite in one invocation (each on its own hub, namespace
and checkpoint container, so neither sees the other's events or blobs), and reports per step
the time to balance, the partitions moved, duplicates and lost events.

A step that does not balance within its timeout is reported with ``balanced_s: null`` and
the timeout it hit; it is left out of the ratio rather than counted at the timeout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypedDict

from eventhub_balancer.local import sdkbalancing
from eventhub_balancer.local.scenarios import running, systems


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    partitions: int = 32
    grow_to: int = 40
    rate: float = 300.0
    interval_seconds: int = 5
    settle_s: float = 2.0
    #: Ours balances within seconds; a minute means it is broken, not slow.
    ours_timeout_s: float = 60.0
    #: The SDK needs an ownership expiry (6 intervals) plus claims, one partition per cycle.
    sdk_timeout_s: float = 90.0
    work_dir: Path | None = None


#: For tests and quick looks: a small hub and a short cycle (the SDK's expiry is 6 cycles).
QUICK = Settings(
    partitions=8,
    grow_to=10,
    rate=100.0,
    interval_seconds=2,
    settle_s=1.0,
    ours_timeout_s=30.0,
    sdk_timeout_s=30.0,
)


class Side(TypedDict):
    balanced_s: float | None
    #: balanced_s without the time the pods' processes took to start (the same for both).
    balancing_s: float | None
    moved: int
    duplicates: int
    lost: int


class StepFigures(TypedDict):
    step: str
    sdk: Side
    ours: Side
    ratio: float | None
    ratio_balancing: float | None


class Report(TypedDict):
    steps: list[StepFigures]
    ratio_balanced_s: float | None
    ratio_balancing_s: float | None
    sdk: running.Summary
    ours: running.Summary
    settings: dict[str, float | int]


def _side(step: running.StepSummary) -> Side:
    return {
        "balanced_s": step["balanced_s"],
        "balancing_s": step["balancing_s"],
        "moved": step["moved"],
        "duplicates": step["duplicates"],
        "lost": step["lost"],
    }


def _ratio(sdk: float | None, ours: float | None) -> float | None:
    if sdk is None or ours is None or ours <= 0:
        return None
    return round(sdk / ours, 1)


def _total_ratio(
    sdk: list[running.StepSummary],
    ours: list[running.StepSummary],
    key: Literal["balanced_s", "balancing_s"],
) -> float | None:
    """Sum over the steps both balanced in time, SDK over ours."""
    pairs = [(a[key], b[key]) for a, b in zip(sdk, ours, strict=True)]
    both = [(a, b) for a, b in pairs if a is not None and b is not None]
    total = sum(b for _, b in both)
    return round(sum(a for a, _ in both) / total, 1) if total > 0 else None


def compare(sdk: running.Summary, ours: running.Summary, settings: Settings) -> Report:
    steps: list[StepFigures] = []
    for a, b in zip(sdk["steps"], ours["steps"], strict=True):
        steps.append(
            {
                "step": a["step"],
                "sdk": _side(a),
                "ours": _side(b),
                "ratio": _ratio(a["balanced_s"], b["balanced_s"]),
                "ratio_balancing": _ratio(a["balancing_s"], b["balancing_s"]),
            }
        )
    return {
        "steps": steps,
        "ratio_balanced_s": _total_ratio(sdk["steps"], ours["steps"], "balanced_s"),
        "ratio_balancing_s": _total_ratio(sdk["steps"], ours["steps"], "balancing_s"),
        "sdk": sdk,
        "ours": ours,
        "settings": {
            "partitions": settings.partitions,
            "grow_to": settings.grow_to,
            "rate": settings.rate,
            "interval_seconds": settings.interval_seconds,
            "sdk_timeout_s": settings.sdk_timeout_s,
            "ours_timeout_s": settings.ours_timeout_s,
        },
    }


def run(settings: Settings, *, observer: Callable[[running.Progress], None]) -> Report:
    hubs = {"bench-ours": settings.partitions, "bench-sdk": settings.partitions}
    summaries: dict[str, running.Summary] = {}
    with running.local_stack(hubs=hubs, work_dir=settings.work_dir) as (stack, loop, root):
        for label in ("ours", "sdk"):
            site = running.make_site(
                stack=stack,
                loop=loop,
                root=root,
                label=label,
                hub=f"bench-{label}",
                interval_seconds=settings.interval_seconds,
            )
            system: systems.System = (
                systems.OursSystem(site) if label == "ours" else sdkbalancing.SdkSystem(site)
            )
            options = running.ScenarioOptions(
                partitions=settings.partitions,
                grow_to=settings.grow_to,
                rate=settings.rate,
                interval_seconds=settings.interval_seconds,
                settle_s=settings.settle_s,
                balance_timeout_s=(
                    settings.ours_timeout_s if label == "ours" else settings.sdk_timeout_s
                ),
            )
            scenario = running.Scenario(
                site=site, system=system, options=options, observer=observer
            )
            summaries[label] = scenario.run()
    return compare(summaries["sdk"], summaries["ours"], settings)
