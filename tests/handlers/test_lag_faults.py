"""The hub's last sequence numbers (weighting "lag", and the backlog behind the recommended
replicas) that cannot be read: a standing fault is logged once, naming the consumer, not at
every cycle; a new fault, and the end of it, once each."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import startpositions
from eventhub_balancer.handlers import memories
from tests.handlers.test_cycles import NAME, NS, SPEC, cycle, make_kube
from tests.support import fakes


class Ends(fakes.FakeHubs):
    """Event Hubs whose partition ends fail with ``fault`` while it is set."""

    fault: errors.EventHubBalancerError | None = None

    async def last_sequence_numbers(
        self, **kwargs: Any
    ) -> dict[str, startpositions.PartitionBounds]:
        if self.fault is not None:
            raise self.fault
        return await super().last_sequence_numbers(**kwargs)


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "last sequence numbers" in r.getMessage()]


async def test_a_standing_fault_of_the_ends_is_logged_once_and_its_end_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = make_kube()
    kube.add_consumer(NS, NAME, {**SPEC, "balancing": {"weighting": "lag"}})
    hubs = Ends(store=fakes.FakeCheckpointStore())
    hubs.fault = errors.EventHubUnreachable("Event Hub 'orders': no answer within 10 s")
    memory = memories.Memory()
    caplog.set_level(logging.INFO)
    now = 0.0
    for _ in range(10):
        await cycle(kube, hubs, memory, now=now)
        for pod in ("a", "b"):
            kube.acknowledge(NS, pod)
        now += 10
    assert len(said(caplog)) == 1, said(caplog)
    assert said(caplog)[0].startswith(f"{NS}/{NAME}: ")
    assert "no answer within 10 s" in said(caplog)[0]
    hubs.fault = errors.EventHubAuthenticationFailed("Event Hub 'orders': credentials rejected")
    await cycle(kube, hubs, memory, now=now)
    assert len(said(caplog)) == 2, "a new fault is said"
    hubs.fault = None
    for _ in range(3):
        now += 10
        await cycle(kube, hubs, memory, now=now)
    assert len(said(caplog)) == 3, said(caplog)
    assert said(caplog)[-1] == f"{NS}/{NAME}: the hub's last sequence numbers are read again"
