"""A throttle that refuses only the operator's writes, and what wakes its consumers after it.

API Priority and Fairness answers 429 with a ``Retry-After``. The operator's reads are sent
again by the client after a short one (`adapters.kuberetries`), so a throttle can let them
through and refuse only its writes: the pods' relisting, which wakes a namespace's consumers
once it is listed again after a refusal (`test_relisting_wakes`), then sees nothing refused.
Each refused cycle backed off, doubling up to a minute, and nothing woke it when the writes
were accepted again: a pod deleted during such a throttle kept its partitions up to a minute
after it (18 s in one run on a real kube-apiserver,
`tests/realkube/wire/test_throttled_operator.py`). On fake time, over the in-memory API,
which answers the operator's writes as the adapter reports a real 429 (`kubeclients` wraps
the client's exception).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeclients
from eventhub_balancer.handlers import registering, throttles
from tests.handlers.test_daemons import NS, SPEC, Stopped, clock, loop_time
from tests.support import fakes, watches

pytestmark = pytest.mark.looptime

#: The throttle, in loop time: long enough for the backoff to reach its minute.
THROTTLE_FROM, THROTTLE_UNTIL = 5.0, 125.0
#: kube-apiserver's first Retry-After while its API Priority and Fairness rejects.
RETRY_AFTER = "1"


def refused(what: str, retry_after: str = RETRY_AFTER) -> errors.EventHubBalancerError:
    """What the adapter raises for a write the API server throttled (429, plain text)."""
    e = kube_exceptions.ApiException(status=429, reason="Too Many Requests")
    e.body = "Too many requests, please try again later.\n"
    e.headers = {"Retry-After": retry_after, "Content-Type": "text/plain"}
    return kubeclients._wrap(e, what)


class ThrottledKube(fakes.FakeKube):
    """The in-memory API, refusing every write with 429 between two loop times, reads not."""

    def __init__(self, start: float, until: float, *, retry_after: str = RETRY_AFTER) -> None:
        super().__init__()
        self.start, self.until, self.retry_after = start, until, retry_after
        #: every write refused: its loop time, and the object's name (a cycle's first write
        #: is its consumer's status: the name is the consumer's)
        self.refused_by: list[tuple[float, str]] = []

    @property
    def refusals(self) -> list[float]:
        return [at for at, _ in self.refused_by]

    def _write(self, verb: str, kind: str, name: str) -> None:
        now = loop_time()
        if self.start <= now < self.until:
            self.writes[kind] = self.writes.get(kind, 0) + 1
            self.refused_by.append((now, name))
            raise refused(f"{verb} {kind} {name}", self.retry_after)
        super()._write(verb, kind, name)


class Consumers:
    """One operator over the throttled fake, with one daemon per consumer (each in its own
    namespace, or several in one)."""

    def __init__(self, kube: ThrottledKube) -> None:
        self.kube = kube
        self.hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
        self.operator = registering.Operator(kube=kube, hubs=self.hubs, clock=clock)
        self.watch = watches.Watch(kube, self.operator.cache, operator=self.operator)
        self.stopped = Stopped()
        self.tasks: list[asyncio.Task[None]] = []

    def add(self, namespace: str, name: str, *pods: str) -> None:
        spec: Mapping[str, Any] = {**SPEC, "selector": {"matchLabels": {"app": name}}}
        if not any(k[0] == "secret" and k[1] == namespace for k in self.kube.objects):
            self.kube.add_secret(
                namespace,
                "eh",
                {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"},
            )
            self.kube.add_secret(namespace, "b", {"cs": "UseDevelopmentStorage=true"})
        self.kube.add_consumer(namespace, name, spec)
        for pod in pods:
            self.kube.add_pod(namespace, pod, labels={"app": name}, since=clock())
        self.tasks.append(
            asyncio.create_task(
                registering.run_daemon(
                    self.operator, namespace=namespace, name=name, spec=spec, stopped=self.stopped
                )
            )
        )

    async def stop(self) -> None:
        self.stopped.event.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), timeout=60)


async def until(seconds: float) -> None:
    await asyncio.sleep(seconds - loop_time())


def owned(kube: fakes.FakeKube, namespace: str, pod: str) -> set[str]:
    return set(kube.assignment(namespace).get(pod, {}))


async def test_a_pod_deleted_while_writes_are_throttled_is_reassigned_once_they_are_accepted() -> (
    None
):
    kube = ThrottledKube(THROTTLE_FROM, THROTTLE_UNTIL)
    consumers = Consumers(kube)
    consumers.add(NS, "orders", "a", "b")
    try:
        await until(1)
        assert (owned(kube, NS, "a"), owned(kube, NS, "b")) == ({"0", "1"}, {"2", "3"})
        await until(10)
        kube.remove_pod(NS, "b")  # deleted during the throttle: its cycle is refused
        consumers.watch.deliver("pod", "configmap")
        await until(THROTTLE_UNTIL - 0.01)
        assert owned(kube, NS, "a") == {"0", "1"}  # nothing written meanwhile
        assert kube.refusals, "the cycles were refused"
        # Within a few seconds of the writes being accepted, not at the end of a backoff
        # that grew to a minute meanwhile.
        await until(THROTTLE_UNTIL + 3)
        assert owned(kube, NS, "a") == {"0", "1", "2", "3"}
    finally:
        await consumers.stop()


#: Consumers throttled together, three namespaces: what the operator asks of a throttled server.
MANY = 30
#: A throttle long enough for every backoff to reach its minute (and the probe its pace).
LONG_UNTIL = 600.0


async def test_many_throttled_consumers_ask_at_a_bounded_pace_and_all_resume_at_its_end() -> None:
    kube = ThrottledKube(THROTTLE_FROM, LONG_UNTIL)
    consumers = Consumers(kube)
    namespaces = ("shop", "billing", "search")
    names = [(namespaces[i % 3], f"c{i}") for i in range(MANY)]
    for namespace, name in names:
        consumers.add(namespace, name, f"{name}-a", f"{name}-b")
    try:
        await until(2)
        assert all(owned(kube, ns, f"{name}-b") for ns, name in names)
        await until(10)
        for namespace, name in names:
            kube.remove_pod(namespace, f"{name}-b")
        consumers.watch.deliver("pod", "configmap")
        await until(LONG_UNTIL - 0.01)
        assert not any(owned(kube, ns, f"{name}-a") == {"0", "1", "2", "3"} for ns, name in names)
        # No consumer tries again sooner than the server's Retry-After (1 s).
        by_consumer: dict[str, list[float]] = {}
        for at, name in kube.refused_by:
            by_consumer.setdefault(name, []).append(at)
        gaps = [b - a for times in by_consumer.values() for a, b in itertools.pairwise(times)]
        assert min(gaps) >= float(RETRY_AFTER)
        # Once the backoffs have grown (the last five minutes): each consumer about once a
        # minute, and one probe at the server's pace for the whole operator.
        late = [at for at, _ in kube.refused_by if at >= LONG_UNTIL - 300]
        pace = MANY / registering.MAX_RETRY_SECONDS + 1 / float(RETRY_AFTER)
        assert len(late) <= pace * 300 * 1.1
        # Within a few seconds of the writes being accepted, every consumer has reassigned.
        await until(LONG_UNTIL + throttles.PROBE_MAX_SECONDS)
        balanced = [owned(kube, ns, f"{name}-a") == {"0", "1", "2", "3"} for ns, name in names]
        assert all(balanced), f"{balanced.count(False)} of {MANY} not reassigned"
    finally:
        await consumers.stop()


async def test_a_long_retry_after_is_waited_by_all_but_the_probe_up_to_its_bound() -> None:
    """kube-apiserver asks up to 16 s while it keeps rejecting: the probe tries every 5 s."""
    kube = ThrottledKube(THROTTLE_FROM, THROTTLE_UNTIL, retry_after="16")
    consumers = Consumers(kube)
    consumers.add(NS, "orders", "a", "b")
    consumers.add(NS, "payments", "p", "q")
    try:
        await until(10)
        kube.remove_pod(NS, "b")
        kube.remove_pod(NS, "q")
        consumers.watch.deliver("pod", "configmap")
        await until(THROTTLE_UNTIL - 0.01)
        probe = consumers.operator.throttle.probe
        assert probe is not None
        tries = {
            n: [at for at, name in kube.refused_by if name == n] for n in ("orders", "payments")
        }
        probing, other = tries[probe[1]], tries[({"orders", "payments"} - {probe[1]}).pop()]
        gaps = [b - a for a, b in itertools.pairwise(probing)]
        assert gaps
        assert all(g == pytest.approx(throttles.PROBE_MAX_SECONDS, abs=0.1) for g in gaps)
        # The other: 16 s at least (the server's), then doubling.
        assert [round(b - a) for a, b in itertools.pairwise(other)] == [16, 32, 60]
        await until(THROTTLE_UNTIL + throttles.PROBE_MAX_SECONDS + 1)
        assert owned(kube, NS, "a") == {"0", "1", "2", "3"}
        assert owned(kube, NS, "p") == {"0", "1", "2", "3"}
    finally:
        await consumers.stop()


async def test_writes_accepted_for_a_consumer_never_refused_end_no_throttle() -> None:
    """A throttle of some namespaces only (a FlowSchema distinguishing by namespace): the
    others' writes must not wake the throttled consumers at each of them."""
    woken: list[throttles.Key] = []
    throttle = throttles.Throttle(woken.append)
    for at, key in enumerate((("b", "x"), ("b", "y"))):
        throttle.refused(key, retry_after=1.0, backoff=0.5, now=float(at))
    throttle.succeeded(("a", "z"), wrote=True)
    assert woken == []
    throttle.succeeded(("b", "y"), wrote=True)  # one of them was accepted: the others try
    assert woken == [("b", "x")]
    assert throttle.throttled == {}


async def test_a_probe_that_had_nothing_to_write_passes_the_probe_on() -> None:
    woken: list[throttles.Key] = []
    throttle = throttles.Throttle(woken.append)
    first, second = ("b", "x"), ("b", "y")
    assert throttle.refused(first, retry_after=None, backoff=0.5, now=0.0) == 1.0
    assert throttle.refused(second, retry_after=None, backoff=0.5, now=0.5) == 0.5
    throttle.succeeded(first, wrote=False)  # proves nothing of the writes
    assert woken == [second]
    assert throttle.refused(second, retry_after=30.0, backoff=1.0, now=1.0) == 5.0
    throttle.forget(second)
    assert (throttle.throttled, throttle.probe) == ({}, None)
