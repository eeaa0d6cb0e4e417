"""A model-based test of the watch, the rosters and the cycle, with the faults of a real API
server, on fake time: two operator replicas over one fake API server.

Hypothesis drives pods (join, leave, relabel, recreate under the same name, readiness), the
pods' acknowledgements, the two replicas' watch streams (delivered late and partly, so kinds
arrive reordered against each other; events lost with a 410 re-list), their cycles, and the
clock. After every step, over the API server's own record of writes (`ledgers`):
- epochs strictly rise per partition: ``status.epochs`` never goes down, and
- no two pods hold one partition at one epoch.
At the end, after a quiet spell with the watches in step: each replica's roster equals a fresh
listing, every partition is owned, and the assignment is balanced again.
"""

from __future__ import annotations

import asyncio
import datetime

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import rosters
from tests.handlers import test_cycles
from tests.support import fakes, ledgers, watches

NS, NAME = test_cycles.NS, test_cycles.NAME
PODS = ("a", "b", "c", "d", "e")
STREAMS = ("consumer", "pod", "configmap")
PARTITIONS = 4  # FakeHubs' hub


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TwoReplicas(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.kube = test_cycles.make_kube()
        self.hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
        self.clock = Clock()
        self.replicas = (
            watches.Replica(self.kube, self.hubs, clock=self.clock),
            watches.Replica(self.kube, self.hubs, clock=self.clock),
        )

    def teardown(self) -> None:
        self.loop.close()

    @property
    def now(self) -> datetime.datetime:
        return test_cycles.at(self.clock.now)

    def _pods(self) -> set[str]:
        return {name for (kind, ns, name) in self.kube.objects if kind == "pod" and ns == NS}

    # --- the pods ---

    @rule(pod=st.sampled_from(PODS))
    def join(self, pod: str) -> None:
        if pod not in self._pods():
            self.kube.add_pod(NS, pod, labels={"app": "c"}, since=self.now)

    @rule(pod=st.sampled_from(PODS))
    def leave(self, pod: str) -> None:
        if pod in self._pods():
            self.kube.remove_pod(NS, pod)

    @rule(pod=st.sampled_from(PODS), app=st.sampled_from(("c", "moved")))
    def relabel(self, pod: str, app: str) -> None:
        body = self.kube.objects.get(("pod", NS, pod))
        if body is not None:
            body["metadata"]["labels"] = {"app": app}
            self.kube._store("pod", NS, body)

    @rule(pod=st.sampled_from(PODS))
    def recreate(self, pod: str) -> None:
        """The same name, another pod (a StatefulSet's)."""
        if pod in self._pods():
            self.kube.remove_pod(NS, pod)
            self.kube.add_pod(NS, pod, labels={"app": "c"}, since=self.now)

    @rule(pod=st.sampled_from(PODS), ready=st.booleans())
    def readiness(self, pod: str, ready: bool) -> None:
        if pod in self._pods():
            self.kube.set_ready(NS, pod, ready=ready, since=self.now)

    @rule()
    def acknowledge(self) -> None:
        for pod in self.kube.assignment(NS):
            if pod in self._pods():
                self.kube.acknowledge(NS, pod)

    # --- the operator replicas and their watches ---

    @rule(replica=st.sampled_from((0, 1)), kind=st.sampled_from(STREAMS), partly=st.booleans())
    def deliver(self, replica: int, kind: str, partly: bool) -> None:
        self.replicas[replica].watch.deliver(kind, count=1 if partly else None)

    @rule(replica=st.sampled_from((0, 1)), kind=st.sampled_from(STREAMS))
    def lose_and_relist(self, replica: int, kind: str) -> None:
        """The stream broke and resumed with 410 Gone: its events are lost, kopf re-lists."""
        watch = self.replicas[replica].watch
        watch.skip(kind)
        watch.relist(kind)

    @rule(replica=st.sampled_from((0, 1)))
    def cycle(self, replica: int) -> None:
        self.loop.run_until_complete(self.replicas[replica].cycle(NS, NAME, now=self.now))

    @rule(first=st.sampled_from((0, 1)))
    def race(self, first: int) -> None:
        """One replica catches up and cycles; the other cycles on what its watch has shown,
        which may be behind: the interleaving that a stale read would turn into a wrong epoch."""
        ahead, behind = self.replicas[first], self.replicas[1 - first]
        ahead.watch.deliver()
        self.loop.run_until_complete(ahead.cycle(NS, NAME, now=self.now))
        self.loop.run_until_complete(behind.cycle(NS, NAME, now=self.now))

    @rule(seconds=st.sampled_from((0.5, 2.0, 6.0, 31.0)))
    def wait(self, seconds: float) -> None:
        self.clock.now += seconds

    # --- what must always hold ---

    @invariant()
    def no_epoch_twice_and_none_lower(self) -> None:
        ledgers.assert_safe(self.kube.history)

    @rule()
    def quiet(self) -> None:
        """Quiet: the watches catch up, both replicas cycle with the pods acknowledging, and
        the fleet is back in balance and each roster equals a fresh listing."""
        for replica in self.replicas:
            replica.watch.deliver()
        for _ in range(12):
            for replica in self.replicas:  # both replicas stay active
                replica.watch.deliver()
                self.loop.run_until_complete(replica.cycle(NS, NAME, now=self.now))
            self.acknowledge()
            self.clock.now += 31.0  # past any grace period or hand-off timeout
        for replica in self.replicas:
            replica.watch.deliver()
        self._check_quiet()

    def _check_quiet(self) -> None:
        selector = specs.parse_spec(test_cycles.SPEC).selector
        listed = self.loop.run_until_complete(
            self.kube.list_selected_pods(namespace=NS, selector=selector)
        )
        fresh = {b["metadata"]["name"]: b["metadata"]["resourceVersion"] for b in listed.items}
        for replica in self.replicas:
            roster = replica.cache.rosters.roster(namespace=NS, name=NAME)
            if roster is None:
                continue
            held = {
                b["metadata"]["name"]: b["metadata"]["resourceVersion"]
                for b in roster.items(rosters.PODS)
            }
            assert held == fresh
        ready = {
            b["metadata"]["name"]
            for b in listed.items
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (b.get("status") or {}).get("conditions") or []
            )
        }
        if not ready:
            return
        owned: dict[str, int] = {}
        for pod, held_partitions in self.kube.assignment(NS).items():
            for _partition, (_epoch, state) in held_partitions.items():
                if state == "owned":
                    owned[pod] = owned.get(pod, 0) + 1
        assert sum(owned.values()) == PARTITIONS
        assert set(owned) <= ready
        share = PARTITIONS // len(ready)
        assert all(share <= owned.get(pod, 0) <= share + 1 for pod in ready)


TwoReplicas.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_two_replicas_over_a_faulty_watch = TwoReplicas.TestCase
