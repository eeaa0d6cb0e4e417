"""A model-based test of the watch, the rosters and the cycle, with the faults of a real API
server, on fake time: two operator replicas over one fake API server.

Hypothesis drives pods (join, leave, relabel, recreate under the same name, readiness), the
pods' acknowledgements, the two replicas' watch streams (delivered late and partly, so kinds
arrive reordered against each other, one kind may lag alone; events lost with a 410 re-list),
a fresh read of the pods in flight while a pod is deleted or relabelled, a daemon restarted
while the pods relisting is in flight, a replica paused for its peer and resumed (its
daemon started again from kopf's indexes), a pod's ConfigMap deleted by someone else,
every ConfigMap deleted while the replicas' ConfigMap streams were away (the re-list that
follows lists nothing, so sends no event), partition listings that lack partitions, the
replicas' cycles, and the clock. A re-list is what kopf's handlers see of one: a listing
event per object, none when nothing is listed.
Time passes as it does for the daemons: each replica cycles every `INTERVAL` seconds and
lists the pods afresh every `relisting.RELIST_SECONDS` (its ConfigMaps every
`relisting.CONFIGMAP_RELIST_SECONDS`), whatever its watch delivered. After
every step, over the API server's own record of writes (`ledgers`) and what the pods are told:
- epochs strictly rise per partition: ``status.epochs`` never goes down;
- no two pods hold one partition at one epoch;
- no partition stays with a pod that does not exist, or that left the selector, for more
  than `BOUND` seconds;
- no roster holds a ConfigMap the API server no longer has for more than `CONFIGMAP_BOUND`.
After a quiet spell with the watches in step, within `BOUND`: no deleted or relabelled pod is
left in a roster or holds a partition; then each replica's roster equals a fresh listing,
every partition is owned (each live pod has its ConfigMap again), and the assignment is
balanced again.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import configmaps, podassignments, specs
from eventhub_balancer.handlers.cache import relisting, shelves
from eventhub_balancer.reconciling import readbacks
from tests.handlers import test_cycles
from tests.support import fakes, ledgers, watches
from tests.support.clocks import Clock

NS, NAME = test_cycles.NS, test_cycles.NAME
PODS = ("a", "b", "c", "d", "e")
STREAMS = ("consumer", "pod", "configmap")
PARTITIONS = 4  # FakeHubs' hub
#: Each replica's daemon cycles at least this often (the consumer's interval).
INTERVAL = 5.0
#: The longest a partition may stay with a pod that is gone or left the selector: the pods
#: are listed afresh within `relisting.RELIST_SECONDS`, a pod silent about what it was given
#: is confirmed within `readbacks.ACK_CONFIRM_SECONDS`, and a cycle follows within an
#: interval; a conflict with the other replica costs one more interval.
BOUND = relisting.RELIST_SECONDS + readbacks.ACK_CONFIRM_SECONDS + 2 * INTERVAL
#: The longest a replica's roster may hold a ConfigMap the API server no longer has (deleted
#: while the watch was away): the ConfigMaps are listed afresh at every sixth turn of the
#: relisting, which turns every `relisting.RELIST_SECONDS`.
CONFIGMAP_BOUND = relisting.CONFIGMAP_RELIST_SECONDS + relisting.RELIST_SECONDS


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
        #: pod -> since when (clock) a partition is with it while it is gone or unselected
        self.ghosts: dict[str, float] = {}
        #: (replica, ConfigMap uid) -> since when its roster holds it and the API server not
        self.phantoms: dict[tuple[int, str], float] = {}

    def teardown(self) -> None:
        self.loop.close()

    @property
    def now(self) -> datetime.datetime:
        return test_cycles.at(self.clock.now)

    def _pods(self) -> set[str]:
        return {name for (kind, ns, name) in self.kube.objects if kind == "pod" and ns == NS}

    def _selected(self) -> set[str]:
        """The pods that exist and match the consumer's selector."""
        return {
            name
            for (kind, ns, name), body in self.kube.objects.items()
            if kind == "pod" and ns == NS and body["metadata"]["labels"].get("app") == "c"
        }

    def _holding(self) -> set[str]:
        """The pods whose ConfigMaps give them a partition (in any state)."""
        return {pod for pod, held in self.kube.assignment(NS).items() if held}

    def _run(self, replica: int) -> None:
        self.loop.run_until_complete(self.replicas[replica].cycle(NS, NAME, now=self.now))

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

    @rule(pod=st.sampled_from(PODS))
    def delete_configmap(self, pod: str) -> None:
        """Someone deletes a pod's ConfigMap (``kubectl delete configmap``): the pod runs no
        partition until the operator writes it again."""
        for (kind, ns, name), body in list(self.kube.objects.items()):
            if kind == "configmap" and ns == NS and body["data"].get(configmaps.KEY_POD) == pod:
                self.kube._deleted("configmap", self.kube.objects.pop((kind, ns, name)))

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

    @rule()
    def lose_every_configmap(self) -> None:
        """While the replicas' ConfigMap streams are away, every ConfigMap is deleted; each
        stream is answered 410 and lists again: nothing, so no event, and the replicas stay
        active while time passes (their rosters hold the ConfigMaps at most so long)."""
        for key in [k for k in self.kube.objects if k[:2] == ("configmap", NS)]:
            self.kube._deleted("configmap", self.kube.objects.pop(key))
        for replica in self.replicas:
            replica.watch.skip("configmap")
            replica.watch.relist("configmap")
        self._pass(CONFIGMAP_BOUND + INTERVAL)

    @rule(replica=st.sampled_from((0, 1)))
    def pause_and_resume(self, replica: int) -> None:
        """The replica pauses for its peer (its daemon stops, its streams close: what they had
        not delivered is lost) and resumes: kopf lists every kind again, and the daemon starts
        again from kopf's indexes, which still hold what vanished meanwhile."""
        chosen = self.replicas[replica]
        chosen.cache.following.forget(namespace=NS, name=NAME)
        chosen.memories.pop((NS, NAME), None)
        chosen.watch.skip()
        for kind in STREAMS:
            chosen.watch.relist(kind)

    @rule(replica=st.sampled_from((0, 1)), kind=st.sampled_from(STREAMS))
    def lag_one_kind(self, replica: int, kind: str) -> None:
        """Every stream but one catches up; that one stays behind, and the replica cycles."""
        self.replicas[replica].watch.deliver(*(k for k in STREAMS if k != kind))
        self._run(replica)

    @rule(
        replica=st.sampled_from((0, 1)),
        pod=st.sampled_from(PODS),
        relabel=st.booleans(),
    )
    def reread_across(self, replica: int, pod: str, relabel: bool) -> None:
        """The replica reads its pods afresh (after a 409, a 404, a re-list); while that
        LIST is on its way, ``pod`` is deleted or relabelled away and the pod stream shows it."""
        if pod not in self._pods():
            return
        chosen = self.replicas[replica]
        chosen.cache.following.refresh(namespace=NS, name=NAME)
        real = self.kube.list_selected_pods

        async def changed_meanwhile(**kwargs: Any) -> listings.Listing:
            answered = await real(**kwargs)
            self.kube.list_selected_pods = real  # type: ignore[method-assign]
            if relabel:
                self.relabel(pod, "moved")
            else:
                self.kube.remove_pod(NS, pod)
            chosen.watch.deliver("pod")
            return answered

        self.kube.list_selected_pods = changed_meanwhile  # type: ignore[method-assign]
        try:
            self._run(replica)
        finally:
            self.kube.list_selected_pods = real  # type: ignore[method-assign]

    @rule(replica=st.sampled_from((0, 1)), pod=st.sampled_from(PODS), relabel=st.booleans())
    def restart_across_relisting(self, replica: int, pod: str, relabel: bool) -> None:
        """kopf restarts the replica's daemon (a crash, a pause for a peer) as its pods
        relisting asks; while that LIST is on its way, ``pod`` is deleted or relabelled away,
        the pod stream shows it, and the daemon starts again from kopf's index."""
        chosen = self.replicas[replica]
        real = self.kube.list_selected_pods

        async def restarted_meanwhile(**kwargs: Any) -> listings.Listing:
            answered = await real(**kwargs)
            self.kube.list_selected_pods = real  # type: ignore[method-assign]
            chosen.cache.following.forget(namespace=NS, name=NAME)
            chosen.memories.pop((NS, NAME), None)
            if pod in self._pods():
                if relabel:
                    self.relabel(pod, "moved")
                else:
                    self.kube.remove_pod(NS, pod)
            chosen.watch.deliver("pod")
            await chosen.cycle(NS, NAME, now=self.now)
            return answered

        self.kube.list_selected_pods = restarted_meanwhile  # type: ignore[method-assign]
        try:
            self.loop.run_until_complete(chosen.cache.relisting.relist())
        finally:
            self.kube.list_selected_pods = real  # type: ignore[method-assign]
        # The daemon started after the LIST was asked: the older answer is not its own, and
        # its roster keeps what its watch has shown.
        roster = chosen.cache.following.roster(namespace=NS, name=NAME)
        if roster is not None:
            held = {b["metadata"]["name"] for b in roster.items(shelves.PODS)}
            assert held == self._selected(), (held, self._selected())

    @rule(replica=st.sampled_from((0, 1)), listed=st.integers(0, PARTITIONS - 1))
    def short_listing(self, replica: int, listed: int) -> None:
        """Event Hubs answers one listing with fewer partitions than the hub has."""
        whole = self.hubs.ids
        self.hubs.ids = whole[:listed]
        try:
            self._run(replica)
        finally:
            self.hubs.ids = whole

    @rule(replica=st.sampled_from((0, 1)))
    def cycle(self, replica: int) -> None:
        self._run(replica)

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
        """Time passes as the daemons see it, with no watch event delivered: each replica
        cycles every `INTERVAL` and lists the pods afresh every `relisting.RELIST_SECONDS`."""
        self._pass(seconds)

    def _pass(self, seconds: float) -> None:
        end = self.clock.now + seconds
        while self.clock.now < end:
            step = min(INTERVAL - self.clock.now % INTERVAL, end - self.clock.now)
            before = self.clock.now
            self.clock.now += step
            relist = before // relisting.RELIST_SECONDS < self.clock.now // relisting.RELIST_SECONDS
            for index in (0, 1):
                if relist:
                    self.loop.run_until_complete(self.replicas[index].cache.relisting.relist())
                if before // INTERVAL < self.clock.now // INTERVAL:
                    self._run(index)
            self._watch_ghosts()
            self._watch_phantoms()

    def _watch_phantoms(self) -> None:
        """No roster holds a ConfigMap the API server lacks beyond `CONFIGMAP_BOUND`: a
        pod whose ConfigMap is gone runs no partition, and a roster that holds it writes
        nothing to bring it back."""
        existing = {
            body["metadata"]["uid"]
            for (kind, ns, _), body in self.kube.objects.items()
            if kind == "configmap" and ns == NS
        }
        held: set[tuple[int, str]] = set()
        for index, replica in enumerate(self.replicas):
            roster = replica.cache.following.roster(namespace=NS, name=NAME)
            for body in roster.items(shelves.CONFIGMAPS) if roster is not None else ():
                held.add((index, body["metadata"]["uid"]))
        phantoms = {key for key in held if key[1] not in existing}
        self.phantoms = {key: self.phantoms.get(key, self.clock.now) for key in phantoms}
        for key, since in self.phantoms.items():
            assert self.clock.now - since <= CONFIGMAP_BOUND, (key, since, self.clock.now)

    def _watch_ghosts(self) -> None:
        """No partition stays with a pod that is gone or left the selector beyond `BOUND`."""
        ghosts = self._holding() - self._selected()
        self.ghosts = {pod: self.ghosts.get(pod, self.clock.now) for pod in ghosts}
        for pod, since in self.ghosts.items():
            assert self.clock.now - since <= BOUND, (pod, since, self.clock.now)

    # --- what must always hold ---

    @invariant()
    def no_epoch_twice_and_none_lower(self) -> None:
        ledgers.assert_safe(self.kube.history)

    @invariant()
    def no_ghost_beyond_the_bound(self) -> None:
        self._watch_ghosts()
        self._watch_phantoms()

    @rule()
    def quiet(self) -> None:
        """Quiet: the watches catch up, both replicas cycle with the pods acknowledging, and
        the fleet is back in balance and each roster equals a fresh listing."""
        for replica in self.replicas:
            replica.watch.deliver()
        quiet_since = self.clock.now
        for _ in range(12):
            for replica in self.replicas:  # both replicas stay active
                replica.watch.deliver()
                self.loop.run_until_complete(replica.cycle(NS, NAME, now=self.now))
            self.acknowledge()
            if self.clock.now - quiet_since < BOUND:
                self._check_left(quiet_since)
            # Past any grace period or hand-off timeout; the relisting turns meanwhile.
            for _ in range(3):
                self.clock.now += relisting.RELIST_SECONDS
                for replica in self.replicas:
                    self.loop.run_until_complete(replica.cache.relisting.relist())
            self.clock.now += 1.0
        for replica in self.replicas:
            replica.watch.deliver()
        self._check_quiet()

    def _check_left(self, quiet_since: float) -> None:
        """Within `BOUND` of quiet, a deleted or relabelled pod is in no roster and holds no
        partition."""
        selected = self._selected()
        for replica in self.replicas:
            roster = replica.cache.following.roster(namespace=NS, name=NAME)
            if roster is not None:
                held = {b["metadata"]["name"] for b in roster.items(shelves.PODS)}
                assert held <= selected, (held - selected, self.clock.now - quiet_since)
        assert self._holding() <= selected, self._holding() - selected
        for (kind, ns, _), body in self.kube.objects.items():
            if kind == "configmap" and ns == NS:
                pod = (body.get("data") or {}).get(configmaps.KEY_POD)
                assert pod in selected or not podassignments.parse_data(body["data"]).partitions

    def _check_quiet(self) -> None:
        selector = specs.parse_spec(test_cycles.SPEC).selector
        listed = self.loop.run_until_complete(
            self.kube.list_selected_pods(namespace=NS, selector=selector)
        )
        fresh = {b["metadata"]["name"]: b["metadata"]["resourceVersion"] for b in listed.items}
        for replica in self.replicas:
            roster = replica.cache.following.roster(namespace=NS, name=NAME)
            if roster is None:
                continue
            held = {
                b["metadata"]["name"]: b["metadata"]["resourceVersion"]
                for b in roster.items(shelves.PODS)
            }
            assert held == fresh
            managed = self.loop.run_until_complete(self.kube.list_managed_configmaps(namespace=NS))
            kept = {b["metadata"]["name"] for b in roster.items(shelves.CONFIGMAPS)}
            assert kept == {b["metadata"]["name"] for b in managed.items}
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
