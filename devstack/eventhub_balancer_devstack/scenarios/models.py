"""A scenario's data: its steps and options, what each step came to, and the live view.

`Step` and `ScenarioOptions` say what a run does; `StepResult` is what one step came to,
`Summary` (with a `StepSummary` per step) what the whole run came to; `Progress` (with a
`PodView` per pod) is what the live view shows on every poll. The runner that produces them
is `runs.ScenarioRun`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypedDict

from eventhub_balancer_devstack.scenarios import systems

Action = Literal["scale", "delete", "kill", "grow"]
#: What a step did, for the figures: a ``scale`` from zero pods is the start.
Kind = Literal["start", "scale-out", "scale-in", "delete", "kill", "grow"]
#: Steps that a user or an autoscaler plans; only a crash (``kill``) is not.
PLANNED: frozenset[Kind] = frozenset({"start", "scale-out", "scale-in", "delete", "grow"})
#: Steps that start a pod's process (a new pod, or a killed one restarted); the others start
#: none, and their time to balance counts from the action.
STARTING: frozenset[Kind] = frozenset({"start", "scale-out", "kill"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    action: Action
    #: replicas for ``scale``, the partition count for ``grow``.
    value: int = 0


def standard_steps(*, partitions: int, grow_to: int) -> tuple[Step, ...]:
    """The demo's scenario: 2 -> 6 -> 3 pods, a deletion, a grown hub, a SIGKILL.

    The SIGKILL comes last: a pod restarted in place is on probation for ``podGraceSeconds``
    once Ready (it gets nothing new, docs/planner.md), so a hub grown right after it gave every
    new partition to the other pods and balanced only when the probation ended, 15-20 s later,
    as on a cluster. Each step measures its own action, not the one before it."""
    return (
        Step(name="start 2 pods", action="scale", value=2),
        Step(name="scale 2 -> 6", action="scale", value=6),
        Step(name="scale 6 -> 3", action="scale", value=3),
        Step(name="delete a pod", action="delete"),
        Step(name=f"grow {partitions} -> {grow_to} partitions", action="grow", value=grow_to),
        Step(name="SIGKILL a pod", action="kill"),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScenarioOptions:
    partitions: int = 32
    grow_to: int = 40
    #: Events per second over the whole hub.
    rate: float = 300.0
    interval_seconds: int = 5
    steps: tuple[Step, ...] | None = None
    #: Time to watch the steady state after a step balanced, before the next one.
    settle_s: float = 3.0
    balance_timeout_s: float = 60.0
    drain_timeout_s: float = 60.0
    #: Where the records and pod logs go (a temporary directory when None; kept when given).
    work_dir: Path | None = None

    def scenario(self) -> tuple[Step, ...]:
        if self.steps is not None:
            return self.steps
        return standard_steps(partitions=self.partitions, grow_to=self.grow_to)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepResult:
    step: Step
    started: float
    ended: float
    #: Seconds from the action to the first balanced snapshot; None: not within the timeout.
    end_to_end_s: float | None
    #: Partitions that changed pod between the balanced states before and after the step.
    moved: int
    #: Seconds until every pod's process was up (started and in touch with what coordinates
    #: it: `systems.System.up`); 0 when the step starts no process (`STARTING`). New or
    #: restarted processes take seconds to start on a loaded machine, whichever balancer they
    #: run.
    pods_up_s: float | None = None
    #: For a deletion or a SIGKILL: seconds until every partition the pod held was held and
    #: taken up by a Ready pod again (another pod, after a deletion); None: not in time.
    failover_s: float | None = None
    #: The pod deleted or killed by the step.
    pod: str | None = None
    kind: Kind = "start"
    reason: str = ""

    @property
    def balanced_s(self) -> float | None:
        """The balancer's own time to balance: from every pod being up to balanced."""
        if self.end_to_end_s is None or self.pods_up_s is None:
            return None
        return round(max(0.0, self.end_to_end_s - self.pods_up_s), 3)


class StepSummary(TypedDict):
    step: str
    kind: Kind
    #: From every pod of the step being up (`StepResult.pods_up_s`) to balanced: the headline.
    balanced_s: float | None
    #: From the step's action to balanced, the pods' start-up included.
    end_to_end_s: float | None
    pods_up_s: float | None
    failover_s: float | None
    pod: str | None
    moved: int
    duplicates: int
    #: Events produced during the step (by their enqueued time) that were never processed.
    lost: int


class Summary(TypedDict):
    produced: int
    processed: int
    lost: int
    duplicates: int
    steps: list[StepSummary]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodView:
    name: str
    ready: bool
    restarts: int
    partitions: tuple[str, ...]
    lag: int
    events_per_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    """What the live view shows; produced on every poll."""

    label: str
    step_index: int  # 0-based; == len(steps) when draining
    steps: tuple[Step, ...]
    phase: str  # "balancing", "steady", "draining", "done"
    elapsed_s: float
    step_elapsed_s: float
    snapshot: systems.Snapshot | None
    pods: tuple[PodView, ...]
    produced: int
    processed: int
    duplicates: int
    lag: int
    events_per_s: float
    results: tuple[StepResult, ...]


Observer = Callable[[Progress], None]
