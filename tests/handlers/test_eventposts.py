"""The Events poster (`handlers.eventposts`) on fake time (looptime): the cycles hand their
Events over and go on; the poster posts them one at a time, in order, within its bounds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import (
    cycles,
    eventposts,
    kopfwiring,
    memories,
    metrics,
    registering,
)
from tests.handlers.test_cycles import NAME, NS, at, make_kube
from tests.support import fakes

pytestmark = pytest.mark.looptime


class SlowEvents:
    """An API server that takes a second per Event, or until ``gate`` opens; ``fail`` names
    the reasons it refuses."""

    def __init__(self, *, gate: asyncio.Event | None = None, fail: frozenset[str] = frozenset()):
        self.gate = gate
        self.fail = fail
        self.posted: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            else:
                await asyncio.sleep(1)
            if body["reason"] in self.fail:
                raise errors.ApiUnavailable("the API server went away")
            self.posted.append(str(body["reason"]))
        finally:
            self.in_flight -= 1


def event(reason: str) -> dict[str, Any]:
    return {"metadata": {"namespace": NS}, "involvedObject": {"name": NAME}, "reason": reason}


async def first_cycle(
    kube: fakes.FakeKube, events: Callable[[Mapping[str, Any]], None]
) -> cycles.Result:
    """The consumer's first cycle (it gives a and b their partitions), its Events handed to
    ``events``; bounded: a cycle that waited for its Events could wait forever."""
    return await asyncio.wait_for(
        cycles.run_cycle(
            kube=kube,
            hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()),
            namespace=NS,
            name=NAME,
            memory=memories.Memory(),
            now=at(0),
            events=events,
        ),
        timeout=10,
    )


async def test_events_are_posted_in_the_order_handed_one_at_a_time() -> None:
    api = SlowEvents()
    poster = eventposts.Poster(api)  # type: ignore[arg-type]
    for reason in ("A", "B", "C"):
        poster.post(event(reason))
    assert poster.pending == 3
    assert await poster.flushed(limit_seconds=10)
    assert api.posted == ["A", "B", "C"]
    assert api.most_in_flight == 1
    assert asyncio.get_running_loop().time() == pytest.approx(3)
    poster.post(event("D"))  # a new burst starts posting again
    assert await poster.flushed(limit_seconds=10)
    assert api.posted[-1] == "D"


async def test_a_failed_post_does_not_stop_the_events_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = SlowEvents(fail=frozenset({"A"}))
    poster = eventposts.Poster(api)  # type: ignore[arg-type]
    poster.post(event("A"))
    poster.post(event("B"))
    with caplog.at_level(logging.WARNING):
        assert await poster.flushed(limit_seconds=10)
    assert api.posted == ["B"]
    assert "could not post Event A" in caplog.text


async def test_a_full_queue_drops_what_comes_after_and_says_so_once_a_burst(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = asyncio.Event()
    api = SlowEvents(gate=gate)
    poster = eventposts.Poster(api, limit=2)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        for reason in ("A", "B", "C", "D"):
            poster.post(event(reason))
    assert poster.dropped == 2
    assert caplog.text.count("dropping") == 1
    gate.set()
    with caplog.at_level(logging.WARNING):
        assert await poster.flushed(limit_seconds=10)
    assert api.posted == ["A", "B"]
    # Once the queue is posted, the burst's count is said.
    assert "the Kubernetes Events that waited are posted; dropped meanwhile: 2" in caplog.text
    # Posted again: the next overflow is said again.
    gate.clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for reason in ("E", "F", "G"):
            poster.post(event(reason))
    assert caplog.text.count("dropping G") == 1
    gate.set()
    with caplog.at_level(logging.WARNING):
        assert await poster.flushed(limit_seconds=10)
    assert api.posted == ["A", "B", "E", "F"]
    assert "dropped meanwhile: 1" in caplog.text  # this burst's own count


async def test_stopping_posts_what_is_queued_within_its_limit_and_then_gives_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = SlowEvents()
    poster = eventposts.Poster(api)  # type: ignore[arg-type]
    for reason in ("A", "B"):
        poster.post(event(reason))
    await poster.stop(limit_seconds=5)
    assert api.posted == ["A", "B"]
    stuck = eventposts.Poster(SlowEvents(gate=asyncio.Event()))  # type: ignore[arg-type]
    stuck.post(event("C"))
    stuck.post(event("D"))
    started = asyncio.get_running_loop().time()
    with caplog.at_level(logging.WARNING):
        await stuck.stop(limit_seconds=5)
    assert asyncio.get_running_loop().time() - started == pytest.approx(5)
    assert stuck.pending == 0
    assert "2 Kubernetes Events were not posted within 5 s of the stop" in caplog.text


async def test_the_stop_limit_counts_from_when_the_operator_began_stopping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kopf gives the daemons' cycles in flight up to 6 s, then waits 5 s more for the tasks
    left (the poster's among them) before it cancels them: behind an API server that hung,
    the operator outlived its bound (`tests/handlers/wire/test_operator_process.py`). The
    poster gives up by itself at the limit, counted from the stop."""
    loop = asyncio.get_running_loop()
    stuck = eventposts.Poster(SlowEvents(gate=asyncio.Event()))  # type: ignore[arg-type]
    stuck.post(event("C"))
    stuck.post(event("D"))
    stuck.stopping(now=loop.time())
    with caplog.at_level(logging.WARNING):
        await asyncio.sleep(4.9)
        assert stuck.pending == 2
        await asyncio.sleep(0.2)
    assert stuck.pending == 0  # no task of its own left for kopf to wait for
    assert "2 Kubernetes Events were not posted within 5 s of the stop" in caplog.text
    started = loop.time()
    await stuck.stop(limit_seconds=5)
    assert loop.time() == started
    stuck.post(event("E"))  # a cycle that ends after: nothing more goes out
    assert stuck.pending == 0
    # Stopped 2 s after the operator began stopping: 3 s left.
    slow = eventposts.Poster(SlowEvents(gate=asyncio.Event()))  # type: ignore[arg-type]
    slow.post(event("F"))
    slow.stopping(now=loop.time())
    await asyncio.sleep(2)
    started = loop.time()
    await slow.stop(limit_seconds=5)
    assert loop.time() - started == pytest.approx(3)
    assert slow.pending == 0
    # Told twice (every daemon is told), the first counts.
    poster = eventposts.Poster(SlowEvents(gate=asyncio.Event()))  # type: ignore[arg-type]
    poster.post(event("D"))
    poster.stopping(now=loop.time())
    await asyncio.sleep(4)
    poster.stopping(now=loop.time())
    started = loop.time()
    await poster.stop(limit_seconds=5)
    assert loop.time() - started == pytest.approx(1)


async def test_a_daemon_stopped_for_the_operators_exit_starts_the_events_clock() -> None:
    from kopf._core.intents import stoppers

    loop = asyncio.get_running_loop()
    for reason, told in (
        (kopf.DaemonStoppingReason.OPERATOR_EXITING, True),
        (kopf.DaemonStoppingReason.RESOURCE_DELETED, False),
        (kopf.DaemonStoppingReason.OPERATOR_PAUSING, False),
    ):
        stuck = eventposts.Poster(SlowEvents(gate=asyncio.Event()))  # type: ignore[arg-type]
        stuck.post(event("C"))
        stopper = stoppers.DaemonStopper()
        watching = loop.create_task(kopfwiring.note_exit(stopper.async_waiter, stuck))
        await asyncio.sleep(1)
        stopper.set(reason=reason)
        await asyncio.sleep(5)
        started = loop.time()
        await stuck.stop(limit_seconds=5)
        assert loop.time() - started == pytest.approx(0 if told else 5), reason
        await asyncio.wait({watching}, timeout=1)
        assert watching.done()


async def test_a_poster_needs_room_for_one_event() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        eventposts.Poster(fakes.FakeKube(), limit=0)


async def test_a_cycle_hands_its_events_over_and_does_not_wait_for_them() -> None:
    kube = make_kube()
    gate = asyncio.Event()
    posted = kube.create_event

    async def held(*, namespace: str, body: Mapping[str, Any]) -> None:
        await gate.wait()
        await posted(namespace=namespace, body=body)

    kube.create_event = held  # type: ignore[method-assign]
    poster = eventposts.Poster(kube)
    result = await first_cycle(kube, poster.post)
    # The cycle gave both pods their partitions and ended with its Events still waiting.
    assert kube.assignment(NS) == {
        "a": {"0": (1, "owned"), "1": (1, "owned")},
        "b": {"2": (1, "owned"), "3": (1, "owned")},
    }
    assert result.writes == 5  # its two Events counted
    assert kube.events == []
    assert poster.pending == 2
    gate.set()
    assert await poster.flushed(limit_seconds=1)
    assert [e["reason"] for e in kube.events] == ["PartitionAssigned", "PartitionAssigned"]


async def test_a_failed_cycle_still_hands_over_the_events_of_the_moves_it_recorded() -> None:
    # As when it posts them itself: the next cycle will not make these moves again.
    kube = make_kube()
    kube.fail("create_configmap", errors.ApiUnavailable("the API server went away"))
    handed: list[Mapping[str, Any]] = []
    with pytest.raises(errors.ApiUnavailable):
        await first_cycle(kube, handed.append)
    assert [e["reason"] for e in handed] == ["PartitionAssigned", "PartitionAssigned"]
    assert kube.events == []


async def test_handed_over_events_are_counted_once_as_they_are_posted() -> None:
    # A cycle counts the writes it makes; the Events it hands over are counted by the poster,
    # whenever it posts them, for the consumer they are about.
    kube = make_kube()
    registry = metrics.Metrics()
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    operator = registering.Operator(kube=kube, hubs=hubs)
    operator.metrics = registry
    operator.consumers[(NS, NAME)] = memories.Memory()  # its daemon runs
    sample = 'ehb_api_writes_total{consumer="orders",kind="event",namespace="shop"}'
    await asyncio.wait_for(
        cycles.run_cycle(
            kube=kube,
            hubs=hubs,
            namespace=NS,
            name=NAME,
            memory=memories.Memory(),
            now=at(0),
            metrics=registry,
            events=operator.events.post,
        ),
        timeout=10,
    )
    assert await operator.events.flushed(limit_seconds=10)
    assert f"{sample} 2.0" in registry.exposition().decode()  # not 4: the cycle left them out
    assert len(kube.events) == 2
    # A consumer whose daemon stopped gets no series back from a late Event.
    del operator.consumers[(NS, NAME)]
    operator.events.post(event("Late"))
    assert await operator.events.flushed(limit_seconds=10)
    assert f"{sample} 2.0" in registry.exposition().decode()


async def test_the_events_of_a_consumer_deleted_meanwhile_are_not_posted() -> None:
    """A consumer deleted while its Events wait (an API server slow to take them, a burst):
    they were posted after it was gone, about an object nobody can describe any more, and
    into a namespace being deleted each failed with a warning. The Event being posted goes
    out; those of another consumer, or of a consumer made anew under the same name, stay."""
    gate = asyncio.Event()
    api = SlowEvents(gate=gate)
    kube = make_kube()
    kube.create_event = api.create_event  # type: ignore[method-assign]
    operator = registering.Operator(
        kube=kube, hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    )
    registry = kopfwiring.build_registry(operator)
    [watching] = [
        h for h in registry._watching.get_all_handlers() if h.id.endswith("consumer_changed")
    ]

    def about(reason: str, name: str, uid: str) -> dict[str, Any]:
        meta = {"namespace": NS, "name": name, "uid": uid}
        return {"metadata": {"namespace": NS}, "involvedObject": meta, "reason": reason}

    operator.events.post(about("InFlight", NAME, "u-1"))
    await asyncio.sleep(0)  # the first post is under way
    operator.events.post(about("Moved", NAME, "u-1"))
    operator.events.post(about("Other", "billing", "u-2"))
    operator.events.post(about("Revoked", NAME, "u-1"))
    deleted = {"metadata": {"namespace": NS, "name": NAME, "uid": "u-1"}}
    await watching.fn(body=deleted, type="DELETED", namespace=NS, name=NAME)
    operator.events.post(about("Anew", NAME, "u-3"))  # a consumer made anew, same name
    gate.set()
    assert await operator.events.flushed(limit_seconds=10)
    assert api.posted == ["InFlight", "Other", "Anew"]
