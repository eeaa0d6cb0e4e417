"""An operator that went through ten times more churn holds no more objects.

An operator runs for months while Deployments roll: every pod it sees has a name and a uid
that never come back, and consumers come and go too. Anything kept per pod name or uid (a
roster's removed names, echoes awaited, metric series, the decisions' carry) or per consumer
(its daemon's bookkeeping, its metric series, its Secrets' values) grows until the memory
limit. Here the daemons (`registering.run_daemon`, the real cache, rosters and cycle) run over
the fake API and its watch on fake time (looptime):

- one consumer through 500 rounds of churn: a pod with a new name joins, an old one is drained
  and leaves, now and then an assignment ConfigMap is deleted under a live pod;
- the same churn with a garbage collector that lags behind the operator: a pod's ConfigMap
  outlives it, and the operator deletes it itself (the uid it deleted is remembered until the
  watch delivers the deletion);
- 500 consumers created, balanced and deleted in turn, each with pods of its own.

After 50 and after 500, at the same point, the same objects are alive: as many of the
project's own types, as many objects reachable from the operator (its rosters, memories,
metrics; the fake API server excepted), and as many entries in the product's memoized
functions, but for those whose bound `BOUNDED_MEMOS` names. Objects are counted after a
collection, never bytes or time.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import gc
import sys
import types
from collections.abc import Iterable
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import timestamps
from eventhub_balancer.handlers import registering
from eventhub_balancer.handlers.cache import serving
from tests.handlers import test_daemons
from tests.support import fakes, watches

pytestmark = pytest.mark.looptime

NS, NAME = test_daemons.NS, test_daemons.NAME
PARTITIONS = tuple(str(p) for p in range(8))
#: Pods alive at once: each round one joins and the oldest leaves.
PODS = 4
SPEC: dict[str, Any] = {
    **test_daemons.SPEC,
    "balancing": {"intervalSeconds": 5, "podGraceSeconds": 20, "handoffTimeoutSeconds": 30},
}
#: Objects of these kinds are shared with the rest of the process (or are code): reachability
#: stops at them.
SHARED = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    asyncio.AbstractEventLoop,
)
SCALARS = (int, float, str, bytes)


def live_ours() -> collections.Counter[str]:
    """Live objects (after a collection) of the product's own types, by type name."""
    gc.collect()
    found: collections.Counter[str] = collections.Counter()
    for o in gc.get_objects():
        module = getattr(type(o), "__module__", None)
        if isinstance(module, str) and module.startswith("eventhub_balancer"):
            found[f"{module}.{type(o).__qualname__}"] += 1
    return found


#: The product's memoized functions that may hold an entry per name they saw, with their bound:
#: each is exempt from the equal counts below and checked against its bound instead. Anything
#: else memoized (`memoized`) must hold as many entries after the churn as before.
BOUNDED_MEMOS: dict[str, int] = {
    # A sort key per pod, partition and ConfigMap name (docs/scale.md: computed again in every
    # cycle of a fleet of thousands): about 1.3 KiB each for names with a Deployment's hashes
    # (a tuple per run of digits), 21 MiB at most.
    "eventhub_balancer.balancing.models.name_key": models.NAME_KEYS_KEPT,
}


def memoized() -> dict[str, tuple[int, int | None]]:
    """Every memoized function of the product (``functools.cache``, ``lru_cache``) now
    loaded: its entries and its bound."""
    found: dict[str, tuple[int, int | None]] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("eventhub_balancer") or module is None:
            continue
        for attribute, value in vars(module).items():
            info = getattr(value, "cache_info", None)
            if callable(info) and getattr(value, "__module__", None) == name:
                found[f"{name}.{attribute}"] = (info().currsize, info().maxsize)
    return found


def assert_memos_held(before: dict[str, tuple[int, int | None]]) -> None:
    after = memoized()
    for name, (size, bound) in after.items():
        if name in BOUNDED_MEMOS:
            assert bound == BOUNDED_MEMOS[name]
            assert size <= bound
        else:
            assert size == before.get(name, (0, None))[0], name


def reachable(roots: Iterable[object], *, outside: Iterable[object]) -> collections.Counter[str]:
    """The objects reachable from ``roots`` by type name, not through ``outside`` nor what the
    process shares (`SHARED`). A number or a string counts once per reference: whether two
    references share one object is chance, how many references there are is what a leak
    changes (a name kept in a dict is one more reference)."""
    seen = {id(o) for o in outside}
    found: collections.Counter[str] = collections.Counter()
    stack = list(roots)
    while stack:
        item = stack.pop()
        if isinstance(item, SHARED):
            continue
        if isinstance(item, SCALARS):
            found[type(item).__name__] += 1
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        found[f"{type(item).__module__}.{type(item).__qualname__}"] += 1
        stack.extend(gc.get_referents(item))
    return found


class Churn:
    """One consumer's daemon over the fakes, and the cluster around it: pods come and go."""

    def __init__(self, *, gc_lags: bool = False) -> None:
        #: whether a pod's ConfigMap outlives it until the operator deletes it
        self.gc_lags = gc_lags
        self.kube = fakes.FakeKube()
        self.kube.add_consumer(NS, NAME, SPEC)
        self.kube.add_secret(
            NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
        )
        self.kube.add_secret(NS, "b", {"cs": "UseDevelopmentStorage=true"})
        self.serial = 0
        self.pods: collections.deque[str] = collections.deque()
        for _ in range(PODS):
            self._join()
        self.hubs = fakes.FakeHubs(PARTITIONS, store=fakes.FakeCheckpointStore())
        self.operator = registering.Operator(
            kube=self.kube, hubs=self.hubs, clock=test_daemons.clock
        )
        self.watch = watches.Watch(self.kube, self.operator.cache, operator=self.operator)
        self.stopped = test_daemons.Stopped()
        self.rounds = 0

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(
            registering.run_daemon(
                self.operator, namespace=NS, name=NAME, spec=SPEC, stopped=self.stopped
            )
        )

    def _join(self) -> None:
        name = f"c-{self.serial}"  # a new name and, from the fake, a new uid
        self.serial += 1
        self.kube.add_pod(NS, name, labels={"app": "c"}, since=test_daemons.clock())
        self.pods.append(name)

    async def _settle(self) -> None:
        """The pods acknowledge what they were told, the watch delivers, the daemon cycles."""
        for _ in range(2):
            told = self.kube.assignment(NS)
            for pod in self.pods:
                if ("pod", NS, pod) in self.kube.objects and pod in told:
                    self.kube.acknowledge(NS, pod)
            self.watch.deliver()
            await asyncio.sleep(1.0)

    async def round(self) -> None:
        """A pod joins; the oldest is drained (deletionTimestamp set), then deleted; every
        fifth round a live pod's ConfigMap is deleted under it and written anew."""
        self._join()
        await self._settle()
        leaving = self.pods[0]
        pod = self.kube.objects["pod", NS, leaving]
        pod["metadata"]["deletionTimestamp"] = timestamps.format_time(test_daemons.clock())
        self.kube._store("pod", NS, pod)
        await self._settle()
        if self.gc_lags:
            # The pod goes; its ConfigMap stays until the operator deletes it as unwanted.
            self.kube._deleted("pod", self.kube.objects.pop(("pod", NS, self.pods.popleft())))
        else:
            self.kube.remove_pod(NS, self.pods.popleft())
        await self._settle()
        if self.rounds % 5 == 0:
            cm = self.kube.configmap_of(NS, self.pods[-1])
            await self.kube.delete_configmap(
                namespace=NS, name=cm["metadata"]["name"], uid=cm["metadata"]["uid"]
            )
            await self._settle()
        self.rounds += 1

    def balanced(self) -> bool:
        owned = collections.Counter(
            pod
            for pod, held in self.kube.assignment(NS).items()
            for _epoch, state in held.values()
            if state == "owned"
        )
        return sum(owned.values()) == len(PARTITIONS) and set(owned) == set(self.pods)

    def held(self) -> collections.Counter[str]:
        return reachable([self.operator], outside=[self.kube, self.hubs])


@pytest.mark.parametrize("gc_lags", [False, True], ids=["gc", "gc-lags"])
async def test_the_operator_holds_as_many_objects_after_500_pods_as_after_50(
    gc_lags: bool,
) -> None:
    churn = Churn(gc_lags=gc_lags)
    task = churn.start()
    try:
        while churn.rounds < 50:
            await churn.round()
        assert churn.balanced()
        ours, held, memos = live_ours(), churn.held(), memoized()
        while churn.rounds < 500:
            await churn.round()
        assert churn.balanced()  # the churn did what it says: the fleet is the last pods
        assert churn.serial == PODS + 500
        if gc_lags:  # the churn did what it says: the operator deleted the ConfigMaps
            deletes = [c for c in churn.kube.calls if c[:2] == ("delete", "configmap")]
            assert len(deletes) >= 500
        assert live_ours() == ours
        assert churn.held() == held
        assert_memos_held(memos)
    finally:
        churn.stopped.event.set()
        async with asyncio.timeout(60):
            await task


class Passing:
    """EventHubConsumers that come and go on one operator, each with pods of its own, as a
    team's short-lived pipelines do: each has a new name, its daemon starts, balances its
    pods, and stops when the consumer is deleted (as kopf stops it)."""

    def __init__(self) -> None:
        self.kube = fakes.FakeKube()
        self.kube.add_secret(
            NS, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
        )
        self.kube.add_secret(NS, "b", {"cs": "UseDevelopmentStorage=true"})
        self.hubs = fakes.FakeHubs(PARTITIONS, store=fakes.FakeCheckpointStore())
        self.operator = registering.Operator(
            kube=self.kube, hubs=self.hubs, clock=test_daemons.clock
        )
        self.watch = watches.Watch(self.kube, self.operator.cache, operator=self.operator)
        self.passed = 0

    async def one(self) -> None:
        name, app = f"passing-{self.passed}", f"app-{self.passed}"
        self.kube.add_consumer(NS, name, {**SPEC, "selector": {"matchLabels": {"app": app}}})
        pods = [f"{name}-{i}" for i in range(2)]
        for pod in pods:
            self.kube.add_pod(NS, pod, labels={"app": app}, since=test_daemons.clock())
        self.watch.deliver()
        stopped = test_daemons.Stopped()
        task = asyncio.create_task(
            registering.run_daemon(
                self.operator,
                namespace=NS,
                name=name,
                spec=self.kube.objects["consumer", NS, name]["spec"],
                stopped=stopped,
            )
        )
        await asyncio.sleep(1.0)
        self.watch.deliver()
        await asyncio.sleep(1.0)
        assert set(self.kube.assignment(NS)) >= set(pods)
        body = self.kube.objects.pop(("consumer", NS, name))
        self.kube._deleted("consumer", body)
        self.watch.deliver()
        stopped.event.set()  # kopf stops the daemon of a deleted object
        async with asyncio.timeout(60):
            await task
        for pod in pods:
            self.kube.remove_pod(NS, pod)
        self.watch.deliver()
        self.passed += 1

    def held(self) -> collections.Counter[str]:
        return reachable([self.operator], outside=[self.kube, self.hubs])


async def test_the_operator_holds_as_many_objects_after_500_consumers_as_after_50() -> None:
    passing = Passing()
    while passing.passed < 50:
        await passing.one()
    ours, held, memos = live_ours(), passing.held(), memoized()
    while passing.passed < 500:
        await passing.one()
    assert live_ours() == ours
    assert passing.held() == held
    assert_memos_held(memos)


def test_counting_sees_names_kept_forever() -> None:
    """The counts above catch a dict that keeps every pod name it was told."""
    kept: dict[str, datetime.datetime] = {}
    root = types.SimpleNamespace(kept=kept)
    before = reachable([root], outside=[])
    kept["c-1"] = datetime.datetime.now(datetime.UTC)
    assert reachable([root], outside=[]) != before


async def test_the_secrets_of_consumers_gone_are_not_kept() -> None:
    """A Secret's value is kept for `serving.REFRESH_SECONDS`: after that, a read of
    another drops it, so values named by consumers long deleted do not pile up."""
    kube = fakes.FakeKube()
    now = [0.0]
    values = serving.SecretValues(kube.read_secret_key, clock=lambda: now[0])
    for i in range(50):
        kube.add_secret(NS, f"s-{i}", {"cs": f"value {i}"})
        assert await values.get(namespace=NS, name=f"s-{i}", key="cs") == f"value {i}"
        now[0] += serving.REFRESH_SECONDS / 10
    kept = reachable([values], outside=[kube])
    for i in range(50, 500):
        kube.add_secret(NS, f"s-{i}", {"cs": f"value {i}"})
        assert await values.get(namespace=NS, name=f"s-{i}", key="cs") == f"value {i}"
        now[0] += serving.REFRESH_SECONDS / 10
    assert reachable([values], outside=[kube]) == kept
