"""kopf's readiness toggles wake their waiters only when the set's state changes
(`handlers.kopftoggles`): a start over n objects costs O(n) wake-ups, not O(n²)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._core.reactor import orchestration, running

from eventhub_balancer.handlers import kopftoggles

#: kopf's stock set, kept before any test installs the quiet one.
STOCK = aiotoggles.ToggleSet


async def start(toggles: aiotoggles.ToggleSet, objects: int) -> int:
    """kopf's start in small: one toggle per object of the first listing, made by the watcher
    one after another; each object's worker drops its toggle once indexed and waits for the
    whole set. How many times a waiter woke and looked."""
    looks = 0
    blocker = await toggles.make_toggle(name="orchestration blocker")

    def indexed() -> bool:
        nonlocal looks
        looks += 1
        return toggles.is_on()

    async def worker(toggle: aiotoggles.Toggle) -> None:
        await toggles.drop_toggle(toggle)
        async with toggles._condition:
            await toggles._condition.wait_for(indexed)

    workers = []
    for i in range(objects):
        toggle = await toggles.make_toggle(name=f"object {i}")
        workers.append(asyncio.create_task(worker(toggle)))
        await asyncio.sleep(0)
    await toggles.drop_toggle(blocker)
    await asyncio.wait_for(asyncio.gather(*workers), timeout=10)
    return looks


@pytest.mark.parametrize("objects", [10, 300])
async def test_a_start_wakes_each_waiter_a_bounded_number_of_times(objects: int) -> None:
    looks = await start(kopftoggles.QuietToggleSet(all), objects)
    # each worker looks once on entering, once when the blocker goes: linear
    assert looks <= 2 * objects


async def test_kopfs_own_set_wakes_every_waiter_at_every_change() -> None:
    """What the quiet set is for: the stock one is quadratic (if kopf fixes it, drop ours)."""
    looks = await start(STOCK(all), 300)
    assert looks > 300 * 300 // 4


async def test_waiters_still_see_every_change_of_state() -> None:
    toggles = kopftoggles.QuietToggleSet(all)
    first = await toggles.make_toggle(name="a")
    second = await toggles.make_toggle(name="b")
    on = asyncio.create_task(toggles.wait_for(True))
    await toggles.drop_toggle(first)
    await asyncio.sleep(0)
    assert not on.done()
    await toggles.drop_toggles([second])
    await asyncio.wait_for(on, timeout=1)
    off = asyncio.create_task(toggles.wait_for(False))
    await asyncio.sleep(0)
    assert not off.done()
    third = await toggles.make_toggle(name="c")
    await asyncio.wait_for(off, timeout=1)
    on_again = asyncio.create_task(toggles.wait_for(True))
    await third.turn_to(True)  # a toggle turned on by its holder wakes them as in kopf
    await asyncio.wait_for(on_again, timeout=1)
    any_on = kopftoggles.QuietToggleSet(any)
    paused = asyncio.create_task(any_on.wait_for(True))
    await any_on.make_toggle(True, name="paused")
    await asyncio.wait_for(paused, timeout=1)


def test_kopf_builds_its_sets_where_install_puts_the_quiet_one() -> None:
    """kopf builds its readiness and pause sets through ``aiotoggles.ToggleSet`` at start; a
    kopf that builds them otherwise fails here, not silently at 1,000 consumers."""
    assert "aiotoggles.ToggleSet(all)" in inspect.getsource(orchestration)
    assert "aiotoggles.ToggleSet(any)" in inspect.getsource(running)
    kopftoggles.install()
    assert aiotoggles.ToggleSet is kopftoggles.QuietToggleSet
    assert isinstance(aiotoggles.ToggleSet(all), kopftoggles.QuietToggleSet)
