"""Event Hubs or the checkpoint store failing for many consumers of one operator at once is said
in a few lines, not in one per consumer; a consumer's own fault is still said alone.

Consumers that name one Event Hubs namespace or one storage account meet its outage together,
and each one's cycles said it: 24 consumers wrote 24 warnings as the outage began, 24 more at
each reminder, and 24 lines at INFO as it ended. On the in-memory ports, each consumer's cycles
run in turn on one wall clock, as one operator's daemons run them, with the operator's one
`dependencylines.DependencyLines` (the rule itself: `tests/adapters/test_shared_lines.py`).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import sharedlines
from eventhub_balancer.handlers import cyclefaults, cycles, dependencylines, memories
from tests.handlers.test_cycles import NAME, SPEC, at
from tests.support import fakes

CONSUMERS = 24
#: Each consumer's cycles run this often (its interval), one after another.
STEP = 30
HUB = errors.EventHubUnreachable(
    "Event Hub 'orders' in shop.servicebus.windows.net: unreachable (ConnectError: refused)"
)
STORE = errors.CheckpointStoreUnreachable(
    "checkpoint container 'checkpoints': HttpResponseError (503 ServerBusy)"
)


class Fleet:
    """``count`` consumers, each in a namespace of its own with its Secrets and one pod, all
    on one Event Hubs namespace and one storage account."""

    def __init__(self, count: int) -> None:
        self.kube = fakes.FakeKube()
        self.hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
        self.lines = dependencylines.DependencyLines()
        self.namespaces = [f"team-{i:02d}" for i in range(count)]
        self.memories = {ns: memories.Memory() for ns in self.namespaces}
        for i, ns in enumerate(self.namespaces):
            spec: dict[str, Any] = copy.deepcopy(SPEC)
            spec["checkpointStore"]["containerName"] = f"checkpoints-{i}"
            self.kube.add_consumer(ns, NAME, spec)
            self.kube.add_secret(
                ns, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
            )
            self.kube.add_secret(ns, "blob", {"cs": "UseDevelopmentStorage=true"})
            self.kube.add_pod(ns, "a", labels={"app": "c"}, since=at(0))

    async def run(self, start: int, end: int) -> None:
        """Every consumer's cycles from ``start`` to ``end`` (wall seconds), `STEP` apart."""
        for second in range(start, end, STEP):
            for ns in self.namespaces:
                await cycles.run_cycle(
                    kube=self.kube,
                    hubs=self.hubs,
                    namespace=ns,
                    name=NAME,
                    memory=self.memories[ns],
                    now=at(second),
                    lines=self.lines,
                )


def lines_of(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """The lines of the dependencies' faults (each consumer's cycles say others too: here,
    that its pod never acknowledges)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and r.name == dependencylines.logger.name
    ]


@pytest.mark.parametrize(("what", "error"), [("hub", HUB), ("store", STORE)])
async def test_an_outage_many_consumers_meet_is_said_in_a_few_lines(
    caplog: pytest.LogCaptureFixture, what: str, error: errors.EventHubBalancerError
) -> None:
    fleet = Fleet(CONSUMERS)
    await fleet.run(0, 30)
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    caplog.set_level(logging.DEBUG, logger=dependencylines.logger.name)
    caplog.clear()
    if what == "store":
        fleet.hubs.store.failure = error
    else:
        fleet.hubs.failure = error
    hour = 3600
    await fleet.run(30, 30 + hour)

    warned = lines_of(caplog, logging.WARNING)
    assert all(str(error) in line for line in warned)
    # Each round (when it starts, and each reminder 10 minutes on) says the first consumer's
    # line, then one for 2, 4, 8 and 16 consumers failing together: 5 lines, where each
    # consumer's line was one.
    alone = [line for line in warned if line.startswith("team-")]
    rounds = hour // cyclefaults.REMIND_SECONDS  # 6 (reminders fall on the backoff's turns)
    assert rounds <= len(alone) <= rounds + 1
    assert "still failing" not in alone[0]
    assert all("still failing" in line for line in alone[1:])
    counts = [int(line.split()[0]) for line in warned if " consumers fail together " in line]
    assert counts == [2, 4, 8, 16] * len(alone)
    assert len(warned) == 5 * len(alone)  # 30 lines in the hour, where they were 144
    unrelated = [
        r for r in caplog.records if r.levelno >= logging.WARNING and str(error) in r.getMessage()
    ]
    assert len(unrelated) == len(warned)  # no other logger says it
    # Every other consumer's own line is there, at DEBUG (`-vv`).
    quiet = lines_of(caplog, logging.DEBUG)
    for ns in fleet.namespaces[1:]:
        assert any(
            line.startswith(f"{ns}/{NAME}: Event Hubs")
            or line.startswith(f"{ns}/{NAME}: checkpoint store")
            for line in quiet
        ), ns
    # Each consumer's condition names its fault, as it did.
    for ns in fleet.namespaces:
        conditions = fleet.kube.status(ns, NAME)["conditions"]
        assert any(c["reason"] == type(error).__name__ for c in conditions), ns

    caplog.clear()
    fleet.hubs.failure = fleet.hubs.store.failure = None
    await fleet.run(30 + hour, 30 + hour + 600)  # the longest backoff, and a cycle
    ended = lines_of(caplog, logging.INFO)
    # The first consumer's line, then one for 2, 4, 8 and 16 consumers: 5 lines, not 24.
    assert ended[0].startswith("team-00/orders: ")
    assert "answers again" in ended[0]
    assert [int(line.split()[0]) for line in ended[1:]] == [2, 4, 8, 16]
    assert all(" answers again together, the last: team-" in line for line in ended[1:])
    assert lines_of(caplog, logging.WARNING) == []


async def test_a_consumers_own_fault_is_said_alone_beside_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fleet = Fleet(8)
    await fleet.run(0, 30)
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    caplog.clear()
    own = fleet.namespaces[3]
    fleet.kube.objects.pop(("secret", own, "eh"))  # its Secret deleted: a fault of its own
    fleet.hubs.failure = HUB  # and the namespace down for everyone
    await fleet.run(30, 90)
    warned = lines_of(caplog, logging.WARNING)
    mine = [line for line in warned if line.startswith(f"{own}/{NAME}: ")]
    assert len(mine) == 1, warned
    assert "Secret" in mine[0]
    assert "EventHubUnreachable" not in mine[0]
    together = [line for line in warned if " consumers fail together " in line]
    assert together
    assert all("(Event Hubs: EventHubUnreachable)" in line for line in together)


def test_the_lines_of_one_dependency_and_reason_are_grouped_and_others_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="eventhub_balancer")
    lines = dependencylines.DependencyLines()
    for i in range(4):
        lines.failed(f"ns/c{i}", "Event Hubs", "EventHubUnreachable", "c%d: x", i, now=100.0 + i)
    lines.failed("ns/s", "checkpoint store", "EventHubUnreachable", "s: y", now=104.0)
    lines.failed("ns/k", "Event Hubs", "SecretNotFound", "k: z", now=104.5)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno > logging.DEBUG]
    tail = dependencylines.FAILED_AGAIN % cyclefaults.REMIND_SECONDS
    group = "consumers fail together (Event Hubs: EventHubUnreachable), the last: "
    assert said == [
        ("WARNING", "c0: x"),
        ("WARNING", f"2 {group}c1: x{tail}"),
        ("WARNING", f"4 {group}c3: x{tail}"),
        ("WARNING", "s: y"),  # another dependency
        ("WARNING", "k: z"),  # another reason
    ]
    caplog.clear()
    later = 104.0 + sharedlines.WINDOW_S
    lines.answered("ns/c0", "Event Hubs", "c0: back", now=later)
    lines.answered("ns/c1", "Event Hubs", "c1: back", now=later + 1)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno > logging.DEBUG]
    assert said == [
        ("INFO", "c0: back"),
        (
            "INFO",
            "2 consumers: Event Hubs answers again together, the last: c1: back"
            + dependencylines.ANSWERED_AGAIN % sharedlines.WINDOW_S,
        ),
    ]
