"""The per-consumer daemon on fake time (looptime): when cycles run, and what wakes them.

The daemon runs over the in-memory ports with a clock read from the event loop, so a grace
period of 20 s or a backoff of minutes passes in no real time, and the tests assert the exact
loop time at which something happens.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import kopf
import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers import cycles, kopfwiring, registering
from eventhub_balancer.reconciling import decisions
from tests.support import fakes, watches

pytestmark = pytest.mark.looptime

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
NS, NAME = "shop", "orders"
KEY = (NS, NAME)
SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "b", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "c"}},
    "balancing": {"intervalSeconds": 100},  # long: only deadlines and wake-ups run cycles
}


def loop_time() -> float:
    return asyncio.get_running_loop().time()


def clock() -> datetime.datetime:
    """The operator's wall clock, on the loop's (fake) time."""
    return T0 + datetime.timedelta(seconds=loop_time())


class Stopped:
    """What kopf hands a daemon: falsy until stopped, with an awaitable wait()."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


class Daemon:
    """One consumer's daemon over fakes, started at loop time 0."""

    def __init__(self, spec: dict[str, Any], *pods: str) -> None:
        self.kube = fakes.FakeKube()
        self.kube.add_consumer(NS, NAME, spec)
        self.kube.add_secret(
            NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
        )
        self.kube.add_secret(NS, "b", {"cs": "UseDevelopmentStorage=true"})
        for pod in pods:
            self.kube.add_pod(NS, pod, labels={"app": "c"}, since=T0)
        self.hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
        self.operator = registering.Operator(kube=self.kube, hubs=self.hubs, clock=clock)
        self.watch = watches.Watch(self.kube, self.operator.cache, operator=self.operator)
        self.stopped = Stopped()
        self.spec = spec

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(
            registering.run_daemon(
                self.operator, namespace=NS, name=NAME, spec=self.spec, stopped=self.stopped
            )
        )

    async def until(self, seconds: float) -> None:
        """Let the loop's time run to ``seconds``."""
        await asyncio.sleep(seconds - loop_time())

    def owned(self, pod: str) -> dict[str, tuple[int, str]]:
        return self.kube.assignment(NS).get(pod, {})

    def deliver(self, *kinds: str) -> None:
        """The watch catches up with the fake API: its events reach the handlers."""
        self.watch.deliver(*kinds)


@pytest.fixture
async def running() -> AsyncIterator[Callable[..., Daemon]]:
    daemons: list[tuple[Daemon, asyncio.Task[None]]] = []

    def start(*pods: str, spec: dict[str, Any] = SPEC) -> Daemon:
        daemon = Daemon(spec, *pods)
        daemons.append((daemon, daemon.start()))
        return daemon

    yield start
    for daemon, task in daemons:
        daemon.stopped.event.set()
        await asyncio.wait_for(task, timeout=60)


async def test_a_notready_pod_loses_its_partitions_when_its_grace_ends(
    running: Callable[..., Daemon],
) -> None:
    daemon = running("a", "b")
    await daemon.until(1)
    assert set(daemon.owned("a")) == {"0", "1"}
    daemon.kube.set_ready(NS, "a", ready=False, since=clock())
    daemon.deliver("pod")
    await daemon.until(20.9)  # podGraceSeconds 20 from the NotReady at 1
    assert set(daemon.owned("a")) == {"0", "1"}
    await daemon.until(21.5)
    assert daemon.owned("a") == {}
    assert daemon.owned("b") == {p: (2 if p in "01" else 1, "owned") for p in "0123"}
    assert daemon.operator.cycles_run <= 4  # the start, the wake-up, the deadline (and once more)


async def test_an_unacknowledged_handoff_ends_at_its_timeout(
    running: Callable[..., Daemon],
) -> None:
    daemon = running("a")
    await daemon.until(1)
    daemon.kube.add_pod(NS, "b", labels={"app": "c"}, since=clock())
    daemon.deliver("pod")
    await daemon.until(2)
    revoking = {p: state for p, (_epoch, state) in daemon.owned("a").items()}
    assert revoking == {"0": "owned", "1": "owned", "2": "revoking", "3": "revoking"}
    await daemon.until(30.5)  # handoffTimeoutSeconds 30 from the revoke at 1.05
    assert daemon.owned("b") == {}
    await daemon.until(31.5)
    assert daemon.owned("b") == {"2": (2, "owned"), "3": (2, "owned")}
    assert "HandoffTimedOut" in [e["reason"] for e in daemon.kube.events]


async def test_an_acknowledgement_hands_off_at_once(running: Callable[..., Daemon]) -> None:
    daemon = running("a")
    await daemon.until(1)
    daemon.kube.add_pod(NS, "b", labels={"app": "c"}, since=clock())
    daemon.deliver("pod")
    await daemon.until(2)
    daemon.kube.acknowledge(NS, "a")
    daemon.deliver("configmap")  # the acknowledgement reaches the handlers
    await daemon.until(2.01)  # one cycle, at once
    assert daemon.owned("b") == {"2": (2, "owned"), "3": (2, "owned")}


async def test_wakeups_within_the_debounce_fold_into_one_cycle(
    running: Callable[..., Daemon],
) -> None:
    """The first wake-up of a burst runs a cycle at once; the rest, within the debounce of
    it, become one more cycle a debounce after it."""
    daemon = running("a")
    await daemon.until(1)
    assert daemon.operator.cycles_run == 1
    started = loop_time()
    for i in range(5):
        daemon.kube.set_ready(NS, "a", ready=i % 2 == 0, since=clock())
        daemon.deliver("pod")
        await asyncio.sleep(registering.DEBOUNCE_SECONDS / 10)
        assert daemon.operator.cycles_run == 2
    await daemon.until(started + registering.DEBOUNCE_SECONDS * 0.99)
    assert daemon.operator.cycles_run == 2
    await daemon.until(2)
    assert daemon.operator.cycles_run == 3


async def test_a_wakeup_after_a_quiet_spell_waits_for_nothing(
    running: Callable[..., Daemon],
) -> None:
    """An acknowledgement (or any single change) is decided on at the loop time it arrives."""
    daemon = running("a")
    await daemon.until(1)
    cycles_before = daemon.operator.cycles_run
    daemon.kube.set_ready(NS, "a", ready=False, since=clock())
    daemon.deliver("pod")
    await asyncio.sleep(0.001)
    assert daemon.operator.cycles_run == cycles_before + 1


async def test_the_echo_of_the_operators_own_writes_runs_no_cycle(
    running: Callable[..., Daemon],
) -> None:
    """The watch delivering the ConfigMaps the first cycle wrote changes nothing the consumer
    did not know from its writes' answers: no cycle runs for it."""
    daemon = running("a", "b")
    await daemon.until(1)
    assert daemon.owned("a")
    assert daemon.operator.cycles_run == 1
    daemon.deliver("configmap")
    await daemon.until(2)
    assert daemon.operator.cycles_run == 1
    daemon.kube.acknowledge(NS, "a")  # a pod's write is news: it wakes the consumer
    daemon.deliver("configmap")
    await daemon.until(2.01)
    assert daemon.operator.cycles_run == 2


async def test_a_configmap_relabelled_away_wakes_the_consumer_its_data_names(
    running: Callable[..., Daemon],
) -> None:
    daemon = running("a")
    await daemon.until(1)
    daemon.deliver("configmap")
    await daemon.until(2)
    cm = daemon.kube.configmap_of(NS, "a")
    cm["metadata"]["labels"][configmaps.LABEL_CONSUMER] = "someone-else"
    daemon.kube._store("configmap", NS, cm)
    daemon.deliver("configmap")
    await daemon.until(2.01)  # well before the interval (100 s): the event woke it
    labels = [
        body["metadata"].get("labels", {}).get(configmaps.LABEL_CONSUMER)
        for (kind, _, _), body in daemon.kube.objects.items()
        if kind == "configmap"
    ]
    assert "someone-else" not in labels  # not trusted: deleted, to be written again


def test_only_a_label_that_disagrees_with_the_data_names_a_consumer() -> None:
    body: dict[str, Any] = {
        "metadata": {"namespace": NS, "labels": {configmaps.LABEL_CONSUMER: NAME}},
        "data": {configmaps.KEY_CONSUMER: NAME},
    }
    assert registering.relabelled_from(body) is None
    body["metadata"]["labels"] = {}
    assert registering.relabelled_from(body) == KEY
    assert registering.relabelled_from({"metadata": {"namespace": NS}, "data": {}}) is None


async def test_wakeups_are_routed_by_the_rosters(running: Callable[..., Daemon]) -> None:
    daemon = running("a")
    await daemon.until(1)
    assert daemon.operator.cycles_run == 1
    # Relabelled away, "a" leaves the consumer's roster at this event: it wakes the consumer.
    pod = daemon.kube.objects["pod", NS, "a"]
    pod["metadata"]["labels"] = {"app": "moved"}
    daemon.kube._store("pod", NS, pod)
    daemon.deliver("pod")
    await daemon.until(2)
    assert daemon.operator.cycles_run == 2
    assert daemon.owned("a") == {}
    # Events of pods it neither selects nor holds, and a status write, do not.
    daemon.kube.add_pod(NS, "z", labels={"app": "other"}, since=T0)
    daemon.deliver("pod")
    daemon.kube.add_pod("elsewhere", "a", labels={"app": "c"}, since=T0)
    daemon.deliver("pod")
    daemon.operator.consumer_changed(KEY, generation=1)  # a status write: same generation
    await daemon.until(3)
    assert daemon.operator.cycles_run == 2
    daemon.operator.consumer_changed(KEY, generation=2)  # a spec change
    await daemon.until(4)
    assert daemon.operator.cycles_run == 3


async def test_a_deleted_consumer_wakes_the_others_at_once(
    running: Callable[..., Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    """The later of two overlapping consumers is refused; once the older one is deleted, it
    looks again at once, not at its next interval. The deletion is said, once."""
    caplog.set_level(logging.INFO, logger=registering.__name__)
    daemon = running("a")
    await daemon.until(1)
    daemon.operator.consumer_deleted((NS, "older"))
    await daemon.until(2)
    assert daemon.operator.cycles_run == 2
    assert [r.getMessage() for r in caplog.records if r.name == registering.__name__] == [
        f"{NS}/older: deleted: its partitions are no longer balanced, and its pods that still "
        "run keep those their ConfigMaps name until they stop (delete or scale down their "
        "workload, or create the EventHubConsumer again)"
    ]
    daemon.operator.consumer_deleted(KEY)  # its own deletion: its daemon stops anyway
    await daemon.until(3)
    assert daemon.operator.cycles_run == 2


async def test_event_hubs_is_asked_again_with_a_doubling_backoff(
    running: Callable[..., Daemon],
) -> None:
    spec = {**SPEC, "balancing": {"intervalSeconds": 1}}
    daemon = running("a", spec=spec)
    daemon.hubs.failure = errors.EventHubUnreachable("amqp: connection refused")
    await daemon.until(16.5)
    asked = [t - T0.timestamp() for t in daemon.hubs.listings]
    assert asked == pytest.approx([0, 1, 3, 7, 15])
    reachable = daemon.kube.condition(NS, NAME, "EventHubReachable")
    assert reachable["reason"] == "EventHubUnreachable"
    daemon.hubs.failure = None
    await daemon.until(31.5)  # the next attempt, at 15 + 16, succeeds
    assert daemon.kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"
    assert len(daemon.owned("a")) == 4


async def test_the_store_is_probed_each_minute_and_backed_off_when_failing(
    running: Callable[..., Daemon],
) -> None:
    spec = {**SPEC, "balancing": {"intervalSeconds": 5}}
    healthy = running("a", spec=spec)
    failing = running("a", spec=spec)
    failing.hubs.store.failure = errors.CheckpointStoreUnreachable("connection refused")
    await healthy.until(130)
    assert healthy.hubs.store.reads == pytest.approx([0, 60, 120])
    assert failing.hubs.store.reads == pytest.approx([0, 5, 15, 35, 75])


async def run_failing(monkeypatch: pytest.MonkeyPatch, *, consumer_exists: bool) -> list[float]:
    """A daemon whose first cycle fails: the loop times of its cycles."""
    calls: list[float] = []
    stopped = Stopped()

    async def run_cycle(**_: Any) -> Any:
        calls.append(loop_time())
        if len(calls) == 1:
            raise errors.NotFound("configmap ehb-orders-pod-a: gone with its pod")
        stopped.event.set()
        return cycles.Result(writes=0, decision=decisions.Decision(generation=1))

    monkeypatch.setattr(cycles, "run_cycle", run_cycle)
    kube = fakes.FakeKube()
    if consumer_exists:
        kube.add_consumer(NS, NAME, SPEC)
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    hubs._cache[f"{NS}/{NAME}"] = hubs.ids  # the partition list a cycle kept
    operator = registering.Operator(kube=kube, hubs=hubs, clock=clock)
    await registering.run_daemon(operator, namespace=NS, name=NAME, spec=SPEC, stopped=stopped)
    assert operator.consumers == {}  # a stopped daemon leaves nothing behind
    assert operator.following.following() == []
    assert hubs.cached(f"{NS}/{NAME}") is None
    return calls


async def test_a_vanished_configmap_does_not_stop_balancing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cycles_at = await run_failing(monkeypatch, consumer_exists=True)
    # Read afresh and decided again at once: a 404 is what a stale read costs.
    assert cycles_at == pytest.approx([0, registering.DEBOUNCE_SECONDS])


async def test_a_deleted_consumer_stops_its_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await run_failing(monkeypatch, consumer_exists=False) == [0]


async def test_a_first_conflict_decides_again_at_once_and_repeated_ones_back_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[float] = []
    stopped = Stopped()

    async def run_cycle(**_: Any) -> Any:
        calls.append(loop_time())
        if len(calls) <= 3:
            raise errors.Conflict("the object has been modified")
        stopped.event.set()
        return cycles.Result(writes=0, decision=decisions.Decision(generation=1))

    monkeypatch.setattr(cycles, "run_cycle", run_cycle)
    kube = fakes.FakeKube()
    kube.add_consumer(NS, NAME, SPEC)
    operator = registering.Operator(
        kube=kube, hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()), clock=clock
    )
    refreshed: list[tuple[str, str]] = []
    monkeypatch.setattr(
        operator.following,
        "refresh",
        lambda *, namespace, name: refreshed.append((namespace, name)),
    )
    await registering.run_daemon(operator, namespace=NS, name=NAME, spec=SPEC, stopped=stopped)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    debounce, retry = registering.DEBOUNCE_SECONDS, registering.RETRY_SECONDS
    assert gaps == pytest.approx([debounce, retry, 2 * retry])
    assert refreshed == [KEY] * 3  # each conflict reads the consumer afresh


async def test_a_stopping_operator_lets_the_cycle_in_flight_finish(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # kopf's own stop of a daemon on the operator's exit, with the daemon handler as
    # `kopfwiring` registers it, while a cycle waits 2 s on a status write.
    from kopf._core.engines import daemons as kopf_daemons
    from kopf._core.intents import stoppers

    daemon = Daemon(SPEC, "p-0")
    written = daemon.kube.patch_consumer_status
    writes: list[float] = []

    async def slow_status_write(**kwargs: Any) -> Any:
        await asyncio.sleep(2.0)
        writes.append(loop_time())
        return await written(**kwargs)

    daemon.kube.patch_consumer_status = slow_status_write  # type: ignore[method-assign]
    registry = kopfwiring.build_registry(daemon.operator)
    [handler] = [h for h in registry._spawning.get_all_handlers() if h.id == "balance"]
    stopper = stoppers.DaemonStopper()
    task = asyncio.create_task(
        registering.run_daemon(
            daemon.operator, namespace=NS, name=NAME, spec=SPEC, stopped=stopper.async_waiter
        )
    )
    await asyncio.sleep(1.0)  # the first cycle is in its status write
    assert writes == []
    await kopf_daemons.stop_daemon(
        settings=kopf.OperatorSettings(),
        daemon=kopf_daemons.Daemon(
            task=task, logger=logging.getLogger("kopf.objects"), handler=handler, stopper=stopper
        ),
        reason=stoppers.DaemonStoppingReason.OPERATOR_EXITING,
    )
    assert task.done()
    assert not task.cancelled()
    assert writes == [pytest.approx(2.0)]  # the write went out, and the daemon ended after it
    assert loop_time() == pytest.approx(2.0)
    assert "cancelled" not in caplog.text


async def test_a_forgotten_consumer_leaves_no_secret_value_of_its_namespace() -> None:
    """Live: namespace shop deleted with its consumer, then created again with Secrets and a
    consumer of the same names, but without the RoleBinding the operator's chart had put in
    it. The operator went on with the deleted Secrets' values, and said nothing of the 403
    until its own restart 8 minutes later. A consumer forgotten (its daemon stopped) now drops
    the values kept of its namespace: the next read goes to the API server."""
    kube = fakes.FakeKube()
    kube.add_secret(NS, "orders-eh", {"connectionString": "before"})
    kube.add_secret("other", "orders-eh", {"connectionString": "elsewhere"})
    operator = registering.Operator(
        kube=kube, hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()), clock=clock
    )
    view = operator.cache.view
    for namespace in (NS, "other"):
        await view.read_secret_key(namespace=namespace, name="orders-eh", key="connectionString")
    operator.forget(KEY)
    kube.add_secret(NS, "orders-eh", {"connectionString": "after"})
    kube.add_secret("other", "orders-eh", {"connectionString": "changed"})
    read = await view.read_secret_key(namespace=NS, name="orders-eh", key="connectionString")
    assert read == "after"
    kept = await view.read_secret_key(namespace="other", name="orders-eh", key="connectionString")
    assert kept == "elsewhere"  # another namespace's value stands until its refresh
