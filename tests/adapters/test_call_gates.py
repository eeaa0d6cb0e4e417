"""The turns at the call gate, shared between tenants (`callgates.FairGate`): a tenant keeps
its calls' order, leaves the reserved turns to the others, takes freed turns in rotation when
they are short, and a call cancelled while it waits (or as its turn comes) holds none."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from eventhub_balancer.adapters import callgates

pytestmark = pytest.mark.looptime


async def calls(
    gate: callgates.FairGate, tenant: Hashable, count: int, seconds: float, log: list[Hashable]
) -> list[asyncio.Task[None]]:
    async def one(i: int) -> None:
        async with gate.turn(tenant):
            log.append((tenant, i))
            await asyncio.sleep(seconds)

    tasks = [asyncio.ensure_future(one(i)) for i in range(count)]
    await asyncio.sleep(0)
    return tasks


async def test_one_tenant_alone_takes_every_turn_but_the_reserved_ones_in_order() -> None:
    gate, log = callgates.FairGate(8), []
    tasks = await calls(gate, "a", 20, 1.0, log)
    assert gate.busy == 6
    assert gate.waiting == 14
    await asyncio.gather(*tasks)
    assert log == [("a", i) for i in range(20)]
    assert gate.most_held == 6
    assert gate.busy == 0
    assert gate.waiting == 0


async def test_another_tenant_finds_a_reserved_turn_free_at_once() -> None:
    gate, log = callgates.FairGate(8), []
    noisy = await calls(gate, "a", 100, 10.0, log)
    quiet = await calls(gate, "b", 2, 1.0, log)
    assert gate.held("b") == 2
    await asyncio.gather(*quiet)
    assert asyncio.get_running_loop().time() == pytest.approx(1.0)
    for task in noisy:
        task.cancel()
    await asyncio.gather(*noisy, return_exceptions=True)
    assert gate.busy == 0
    assert gate.waiting == 0


async def test_tenants_short_of_turns_take_the_freed_ones_in_rotation() -> None:
    gate, log = callgates.FairGate(4, reserved=1), []
    tasks = []
    for tenant in "abcd":  # a takes 3 turns, b the reserved one; c, d and the rest wait
        tasks += await calls(gate, tenant, 6, 1.0, log)
    await asyncio.gather(*tasks)
    # The turns freed together go one to each tenant, not to the calls queued first (a's).
    for round_ in (1, 2, 3):  # while a still has calls waiting
        assert sorted(tenant for tenant, _ in log[4 * round_ : 4 * round_ + 4]) == list("abcd")
    for tenant in "abcd":
        assert [i for t, i in log if t == tenant] == list(range(6))  # each keeps its order


async def test_a_call_cancelled_while_waiting_or_as_its_turn_comes_holds_none() -> None:
    gate, log = callgates.FairGate(1, reserved=0), []
    [first, second, third] = await calls(gate, "a", 3, 1.0, log)
    second.cancel()  # while waiting
    await asyncio.sleep(1.5)
    assert log == [("a", 0), ("a", 2)]
    assert gate.busy == 1
    assert gate.waiting == 0
    late = await calls(gate, "a", 1, 1.0, log)
    await asyncio.sleep(0.5)  # as third's turn ends and late's comes: cancelled then
    late[0].cancel()
    await asyncio.gather(first, third, *late, return_exceptions=True)
    assert gate.busy == 0
    assert gate.waiting == 0
    async with gate.turn("b"):
        assert gate.held("b") == 1


def test_a_gate_without_turns_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one turn"):
        callgates.FairGate(0)
