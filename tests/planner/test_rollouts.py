"""A rolling update moves each partition once: from the pod it replaces to a pod of the new
revision, never through an old pod that is replaced next, nor from one new pod to another.

With ``maxUnavailable: 0`` (docs/install.md) a Deployment adds ``maxSurge`` new pods, and
deletes as many old ones only once the new ones are Ready. A new pod is Ready as soon as it
applied its (empty) assignment, and the operator's cycle follows that within milliseconds,
ahead of the Deployment's deletion of an old pod. Planned as a plain join, that cycle revoked
a share of every old pod for the new one; the old pod deleted next then spread its partitions
over the live pods holding the least, old ones included, and the next new pod took its share
from the first one: on the real control plane 3 or 4 of 16 partitions moved twice or more
during a rollout of 4 pods (tests/realkube/wire/test_rollouts.py measures it there).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from eventhub_balancer.balancing import models, planning

P = models.PartitionId
M = models.MemberName
GRACE = 20.0


@dataclasses.dataclass
class Pod:
    name: str
    revision: int
    state: models.MemberState
    since: float


@dataclasses.dataclass
class Rollout:
    """A Deployment's rolling update (``maxUnavailable: 0``) and the operator, step by step:
    each plan applied, each revoke and each terminating pod's partitions released at once."""

    replicas: int
    surge: int
    partitions: tuple[models.PartitionId, ...]
    pods: dict[str, Pod] = dataclasses.field(default_factory=dict)
    assignment: dict[models.PartitionId, models.Ownership] = dataclasses.field(default_factory=dict)
    moved: Counter[models.PartitionId] = dataclasses.field(default_factory=Counter)
    onto_old: int = 0
    now: float = 100.0
    made: int = 0
    last: models.Plan | None = None

    def members(self) -> tuple[models.Member, ...]:
        newest = max(p.revision for p in self.pods.values())
        return tuple(
            models.Member(
                name=M(p.name),
                state=p.state,
                since=p.since,
                starting=p.state == "notready",
                outgoing=p.revision < newest and p.state != "terminating",
            )
            for p in self.pods.values()
        )

    def cycle(self) -> models.Plan:
        self.now += 0.1
        leaving = {n for n, p in self.pods.items() if p.state == "terminating"}
        released = {
            p: o.epoch
            for p, o in self.assignment.items()
            if o.state == "revoking" or o.owner in leaving
        }
        plan = planning.plan(
            models.Scenario(
                partitions=self.partitions,
                members=self.members(),
                assignment=self.assignment,
                released=released,
                now=self.now,
                options=models.Options(pod_grace_seconds=GRACE, release_wait_seconds=2.0),
            )
        )
        newest = max(p.revision for p in self.pods.values())
        for m in plan.moves:
            if m.kind != "revoke" and m.source is not None and m.target is not None:
                self.moved[m.partition] += 1
                self.onto_old += self.pods[m.target].revision < newest
        self.assignment = dict(plan.assignment)
        self.last = plan
        # A terminating pod that holds nothing has exited and is gone.
        holders = {o.owner for o in self.assignment.values()}
        for name in [n for n in leaving if n not in holders]:
            del self.pods[name]
        return plan

    def add(self, revision: int) -> None:
        name = f"r{revision}-{self.made}"
        self.made += 1
        self.pods[name] = Pod(name=name, revision=revision, state="notready", since=self.now)

    def deployment_controller(self, revision: int) -> None:
        """Scale the old pods down by the new Ready ones, and the new ones up within the
        surge (the old ReplicaSet's terminating pods no longer count in it)."""
        old = sorted(
            (p for p in self.pods.values() if p.revision < revision and p.state != "terminating"),
            key=lambda p: p.name,
        )
        new = [p for p in self.pods.values() if p.revision == revision]
        ready = sum(p.state == "ready" for p in new) + sum(p.state == "ready" for p in old)
        for victim in old[: max(0, ready - self.replicas)]:
            victim.state, victim.since = "terminating", self.now
            old.remove(victim)
        while len(new) < self.replicas and len(old) + len(new) < self.replicas + self.surge:
            self.add(revision)
            new = [p for p in self.pods.values() if p.revision == revision]

    def roll(self, revision: int) -> None:
        for _ in range(100):
            self.deployment_controller(revision)
            self.cycle()
            self.cycle()
            if all(p.revision == revision for p in self.pods.values()) and self.balanced():
                return
            # The new pods turn Ready; the operator sees it before the Deployment acts on it.
            for p in self.pods.values():
                if p.state == "notready":
                    p.state, p.since = "ready", self.now
            self.cycle()
            self.cycle()
        raise AssertionError("the rollout never ended")

    def balanced(self) -> bool:
        return self.last is not None and self.last.balanced


@pytest.mark.parametrize(
    ("replicas", "surge", "partitions"),
    [(4, 1, 16), (4, 1, 32), (8, 2, 32), (3, 1, 32), (10, 3, 32), (4, 4, 16)],
)
def test_a_rolling_update_moves_each_partition_once_onto_a_new_pod(
    replicas: int, surge: int, partitions: int
) -> None:
    rollout = Rollout(
        replicas=replicas, surge=surge, partitions=tuple(P(str(i)) for i in range(partitions))
    )
    for _ in range(replicas):
        rollout.add(0)
        rollout.pods[f"r0-{rollout.made - 1}"].state = "ready"
    for _ in range(3):
        rollout.cycle()
    assert rollout.balanced()
    rollout.moved.clear()
    rollout.roll(1)
    assert rollout.onto_old == 0, "a partition went to a pod the rollout replaced next"
    assert max(rollout.moved.values()) == 1, rollout.moved
    assert sum(rollout.moved.values()) == partitions
    counts = Counter(o.owner for o in rollout.assignment.values())
    assert max(counts.values()) - min(counts.values()) <= 1
