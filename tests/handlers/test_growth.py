"""The growth watch (`handlers.growth`) on fake time (looptime): which hubs it lists and when,
within the operator's budget, and whom it wakes when a hub grew.

The watch runs over the in-memory hub port (`fakes.FakeHubs`), whose lists the tests fill as a
cycle would (``partitions``) and grow by setting ``hub_ids``; its ``hub_listings`` are the
loop times of the watch's listings. Nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import growth, observing, registering
from tests.handlers import test_daemons
from tests.support import fakes
from tests.support.clocks import Clock

pytestmark = pytest.mark.looptime

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
NS = "shop"
FQN = "shop.servicebus.windows.net"
SECRET_KEY = "c2VjcmV0LWtleQ"  # what must never be shown
CONNECTION = f"Endpoint=sb://{FQN}/;SharedAccessKeyName=listen;SharedAccessKey={SECRET_KEY}"
FOUR = ("0", "1", "2", "3")
SIX = ("0", "1", "2", "3", "4", "5")


def loop_time() -> float:
    return asyncio.get_running_loop().time()


async def cached_by_a_cycle(hubs: fakes.FakeHubs, consumer: str, hub: str) -> None:
    """What a consumer's cycle does: list its hub, and the port keeps the list."""
    await hubs.partitions(
        consumer=observing.hub_key(NS, consumer),
        fully_qualified_namespace=FQN,
        eventhub_name=hub,
        connection_string=CONNECTION,
        client_id=None,
        now=loop_time(),
    )


def new_hubs() -> fakes.FakeHubs:
    return fakes.FakeHubs(FOUR, store=fakes.FakeCheckpointStore())


class Woken:
    """The wake-ups the watch asked for: (loop time, (namespace, name))."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, tuple[str, str]]] = []

    def __call__(self, key: tuple[str, str]) -> None:
        self.calls.append((loop_time(), key))

    def keys(self) -> list[tuple[str, str]]:
        return sorted(key for _, key in self.calls)


@pytest.fixture
async def watching() -> AsyncIterator[Callable[..., growth.Watch]]:
    """Start a watch (at the current loop time); every one is stopped after the test."""
    started: list[growth.Watch] = []

    def start(hubs: fakes.FakeHubs, wake: Callable[[tuple[str, str]], None], **kw: Any) -> Any:
        # A period of 1 s unless a test says otherwise: round figures to count listings by.
        kw.setdefault("polls", growth.Polls(every=1.0))
        watch = growth.Watch(hubs, wake=wake, **kw)
        watch.start()
        started.append(watch)
        return watch

    yield start
    for watch in started:
        await watch.stop()


def times(hubs: fakes.FakeHubs, name: str) -> list[float]:
    return [at for at, listed in hubs.hub_listings if listed == name]


# --- the decisions, on a clock the test turns ----------------------------------------------


def test_a_due_hub_waits_for_the_budgets_next_turn() -> None:
    clock = Clock()
    polls = growth.Polls(per_second=4.0, every=1.0, clock=clock)
    polls.sync(["a", "b"])
    assert polls.take() is None  # just listed by a cycle: due a second later
    assert polls.wait() == pytest.approx(1.0)
    clock.now = 1.0
    assert polls.take() == "a"
    assert polls.take() is None  # "b" is due, but the budget's next turn is 0.25 s away
    assert polls.wait() == pytest.approx(0.25)
    clock.now = 1.25
    assert polls.take() == "b"
    polls.done("b")
    clock.now = 2.0
    assert polls.take() is None  # "a" is due, but it is still being listed: it skips its turn
    polls.done("a")
    clock.now = 2.25
    assert polls.take() == "b"
    assert polls.started == 3


def test_hubs_come_and_go_with_the_cache() -> None:
    clock = Clock()
    polls = growth.Polls(per_second=10.0, every=1.0, clock=clock)
    polls.sync(["a", "b"])
    clock.now = 0.5
    polls.sync(["b", "c"])  # "a"'s consumers were forgotten; "c" is new
    assert len(polls) == 2
    clock.now = 1.0
    assert polls.take() == "b"
    clock.now = 1.2
    assert polls.take() is None  # "c" came at 0.5: due at 1.5
    clock.now = 1.5
    assert polls.take() == "c"


def test_only_a_longer_list_is_growth() -> None:
    cached = {"shop/a": FOUR, "shop/b": SIX, "shop/c": ("0", "1")}
    assert growth.grown(SIX, cached) == ["shop/a", "shop/c"]
    assert growth.grown(FOUR, cached) == ["shop/c"]
    assert growth.grown(("0",), cached) == []


def test_the_woken_consumer_is_the_one_the_cache_keeps_the_list_for() -> None:
    assert growth.consumer_key(observing.hub_key("shop", "orders")) == ("shop", "orders")


# --- the watch, over the fake port -----------------------------------------------------------


async def test_a_hub_that_grows_wakes_its_consumers_within_one_poll(
    watching: Callable[..., growth.Watch],
) -> None:
    hubs, woken = new_hubs(), Woken()
    await cached_by_a_cycle(hubs, "a", "orders")
    await cached_by_a_cycle(hubs, "b", "orders")
    await cached_by_a_cycle(hubs, "c", "payments")
    watching(hubs, woken, polls=growth.Polls())  # the default period
    await asyncio.sleep(2.5)
    assert woken.calls == []
    hubs.hub_ids["orders"] = SIX
    await asyncio.sleep(growth.GROWTH_POLL_SECONDS)
    assert woken.keys() == [(NS, "a"), (NS, "b")]
    assert all(at <= 2.5 + growth.GROWTH_POLL_SECONDS for at, _ in woken.calls)
    # Their cycle's next read is the new list; the other hub's consumer keeps its own.
    assert hubs.cached("shop/a") == SIX
    assert hubs.cached("shop/b") == SIX
    assert hubs.cached("shop/c") == FOUR
    await asyncio.sleep(5)
    assert len(woken.calls) == 2  # woken once: the list is as long as the hub now


async def test_consumers_of_one_hub_make_one_listing_per_poll(
    watching: Callable[..., growth.Watch],
) -> None:
    hubs = new_hubs()
    for consumer in ("a", "b", "c"):
        await cached_by_a_cycle(hubs, consumer, "orders")
    await cached_by_a_cycle(hubs, "d", "payments")
    watching(hubs, Woken())
    await asyncio.sleep(10.5)
    assert collections.Counter(name for _, name in hubs.hub_listings) == {
        "orders": 10,
        "payments": 10,
    }
    orders = times(hubs, "orders")
    assert [b - a for a, b in itertools.pairwise(orders)] == pytest.approx([1.0] * 9)


async def test_by_default_a_few_hubs_are_listed_four_times_a_second_and_many_share_the_budget(
    watching: Callable[..., growth.Watch],
) -> None:
    few, many = new_hubs(), new_hubs()
    for i in range(2):
        await cached_by_a_cycle(few, f"c{i}", f"hub-{i}")
    for i in range(30):
        await cached_by_a_cycle(many, f"c{i}", f"hub-{i}")
    watching(few, Woken(), polls=growth.Polls())
    watching(many, Woken(), polls=growth.Polls())
    await asyncio.sleep(10.1)
    # Two hubs: each every quarter second, so growth waits a quarter second at most.
    assert [len(times(few, f"hub-{i}")) for i in range(2)] == [40, 40]
    # Thirty: never more than the operator's budget, each in turn (every 1.5 s).
    assert 190 <= len(many.hub_listings) <= 10.1 * growth.LISTINGS_PER_SECOND
    assert all(6 <= len(times(many, f"hub-{i}")) <= 7 for i in range(30))


async def test_a_hundred_hubs_at_twenty_a_second_are_each_listed_every_five_seconds(
    watching: Callable[..., growth.Watch],
) -> None:
    hubs = new_hubs()
    for i in range(100):
        await cached_by_a_cycle(hubs, f"c{i}", f"hub-{i}")
    watching(hubs, Woken(), polls=growth.Polls(per_second=20.0, every=1.0))
    await asyncio.sleep(31)
    for i in range(100):
        at = times(hubs, f"hub-{i}")
        assert [b - a for a, b in itertools.pairwise(at)] == pytest.approx([5.0] * (len(at) - 1))
        assert len(at) == 6
    # Never more than the budget in any second (a window from each listing on), and no less.
    starts = [round(at * 1_000_000) for at, _ in hubs.hub_listings]
    busiest = max(sum(1 for s in starts if t <= s < t + 1_000_000) for t in starts)
    assert busiest == 20
    assert len(starts) == 600  # 20 a second from 1 s to 31 s


async def test_a_failed_listing_changes_nothing(
    watching: Callable[..., growth.Watch], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=growth.__name__)
    hubs, woken = new_hubs(), Woken()
    await cached_by_a_cycle(hubs, "a", "orders")
    watching(hubs, woken)
    hubs.hub_ids["orders"] = SIX
    hubs.failure = errors.EventHubUnreachable(f"Event Hub 'orders' in {FQN}: no answer")
    await asyncio.sleep(7.5)
    # After each failure in a row the hub rests twice as long: 2 s, then 4 s.
    assert times(hubs, "orders") == pytest.approx([1, 3, 7])
    assert woken.calls == []
    assert hubs.cached("shop/a") == FOUR
    failed = [r for r in caplog.records if "listing failed" in r.getMessage()]
    assert len(failed) == 3
    assert {r.levelno for r in failed} == {logging.DEBUG}
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    hubs.failure = None
    await asyncio.sleep(8)  # its next turn, after a rest of 8 s
    assert times(hubs, "orders")[3] == pytest.approx(15)
    assert [key for _, key in woken.calls] == [(NS, "a")]
    assert SECRET_KEY not in caplog.text
    await asyncio.sleep(2.5)  # a success ends the rests: once a second again
    assert times(hubs, "orders")[4:6] == pytest.approx([16, 17])


class OneHubFails(fakes.FakeHubs):
    """A port whose listings of the hub named ``failing`` fail (its credentials rotated)."""

    failing = "orders"

    async def list_hub(self, hub: Any) -> tuple[str, ...] | None:
        listed = await super().list_hub(hub)
        if self.hub_listings[-1][1] == self.failing:
            raise errors.EventHubUnreachable(f"Event Hub {self.failing!r}: unauthorized")
        return listed


async def test_a_failing_hub_rests_at_most_a_minute_and_others_keep_their_turns(
    watching: Callable[..., growth.Watch],
) -> None:
    hubs, woken = OneHubFails(FOUR, store=fakes.FakeCheckpointStore()), Woken()
    await cached_by_a_cycle(hubs, "a", "orders")
    await cached_by_a_cycle(hubs, "b", "payments")
    watching(hubs, woken)
    await asyncio.sleep(300.5)
    gaps = [b - a for a, b in itertools.pairwise(times(hubs, "orders"))]
    assert gaps[:5] == pytest.approx([2, 4, 8, 16, 32])
    assert max(gaps) == pytest.approx(growth.FAILED_REST_MAX_SECONDS)
    assert len(times(hubs, "payments")) == 300  # once a second, never held up by the other


async def test_a_shrinking_listing_is_ignored(watching: Callable[..., growth.Watch]) -> None:
    hubs, woken = new_hubs(), Woken()
    await cached_by_a_cycle(hubs, "a", "orders")
    watching(hubs, woken)
    hubs.hub_ids["orders"] = ("0", "1")
    await asyncio.sleep(3.5)
    assert len(times(hubs, "orders")) == 3
    assert woken.calls == []
    assert hubs.cached("shop/a") == FOUR


class HangingHubs(fakes.FakeHubs):
    """A port whose listings of the watch never answer (an Event Hubs that hangs)."""

    async def list_hub(self, hub: Any) -> tuple[str, ...] | None:
        await super().list_hub(hub)
        await asyncio.Event().wait()
        raise AssertionError("never answers")


async def test_listings_in_flight_are_bounded_and_end_with_the_watch(
    watching: Callable[..., growth.Watch],
) -> None:
    hubs = HangingHubs(FOUR, store=fakes.FakeCheckpointStore())
    for i in range(10):
        await cached_by_a_cycle(hubs, f"c{i}", f"hub-{i}")
    watch = watching(hubs, Woken(), at_once=3)
    await asyncio.sleep(growth.LISTING_LIMIT_SECONDS - 1)
    # Three listings hang; the rest wait for one to end. None is asked twice meanwhile.
    assert len(hubs.hub_listings) == 3
    await asyncio.sleep(2.5)
    # Given up at their limit (from 1 s on): the next three are asked.
    assert len(hubs.hub_listings) == 6
    started = loop_time()
    await watch.stop(limit_seconds=5)
    assert loop_time() - started < 5
    assert watch._listings == set()


# --- with the operator's daemons ---------------------------------------------------------------


def operator_over(hubs: fakes.FakeHubs) -> tuple[fakes.FakeKube, registering.Operator]:
    """test_daemons' consumer (interval 100 s: only wake-ups run cycles) over ``hubs``."""
    kube = fakes.FakeKube()
    kube.add_consumer(NS, "orders", test_daemons.SPEC)
    kube.add_secret(NS, "eh", {"cs": CONNECTION})
    kube.add_secret(NS, "b", {"cs": "UseDevelopmentStorage=true"})
    for pod in ("a", "b"):
        kube.add_pod(NS, pod, labels={"app": "c"}, since=T0)
    return kube, registering.Operator(kube=kube, hubs=hubs, clock=test_daemons.clock)


@contextlib.asynccontextmanager
async def daemon_running(operator: registering.Operator) -> AsyncIterator[None]:
    """The consumer's daemon, started now and stopped (within 10 s) at the end."""
    stopped = test_daemons.Stopped()
    task = asyncio.create_task(
        registering.run_daemon(
            operator, namespace=NS, name="orders", spec=test_daemons.SPEC, stopped=stopped
        )
    )
    try:
        yield
    finally:
        stopped.event.set()
        await asyncio.wait_for(task, timeout=10)


async def test_a_grown_hub_is_given_out_by_the_cycle_it_wakes(
    watching: Callable[..., growth.Watch],
) -> None:
    hubs = new_hubs()
    kube, operator = operator_over(hubs)
    async with daemon_running(operator):
        watch = watching(hubs, operator.wake, polls=growth.Polls())  # the default period
        await asyncio.sleep(2.5)
        assert operator.cycles_run == 1
        owned = {p for partitions in kube.assignment(NS).values() for p in partitions}
        assert owned == set(FOUR)
        hubs.hub_ids["orders"] = SIX
        await asyncio.sleep(growth.GROWTH_POLL_SECONDS + 0.1)
        assert operator.cycles_run == 2  # the one it woke: the interval is 100 s
        assert watch.woken == 1
        assignment = kube.assignment(NS).values()
        given = {p: epoch for owned in assignment for p, (epoch, _) in owned.items()}
        assert set(given) == set(SIX)
        assert (given["4"], given["5"]) == (1, 1)  # no owner before: given out without a hand-off


async def test_a_stopped_consumer_is_forgotten(watching: Callable[..., growth.Watch]) -> None:
    hubs = new_hubs()
    _, operator = operator_over(hubs)
    async with daemon_running(operator):
        watch = watching(hubs, operator.wake)
        await asyncio.sleep(2.5)
        assert len(watch.polls) == 1
        assert times(hubs, "orders")  # listed while its consumer ran
    await asyncio.sleep(1)  # the watch's next look at the hubs
    assert hubs.hubs() == []
    assert len(watch.polls) == 0
    listed = len(hubs.hub_listings)
    await asyncio.sleep(5)
    assert len(hubs.hub_listings) == listed
