"""A namespace listed again after the API server refused it wakes its consumers.

While the API server throttles (429) or is overloaded (503), the cycles are refused too and
back off, doubling up to a minute (`registering.MAX_RETRY_SECONDS`). A pod deleted during a
throttle was seen by the watch and its cycle refused; once the throttle ended nothing woke the
consumer, and the partitions of the deleted pod waited out the rest of the backoff: replayed
on a real kube-apiserver throttling the operator for 30 s (API Priority and Fairness), they
were reassigned 21 s, and in two runs of six more than 30 s, after it ended
(`tests/realkube/wire/test_throttled_operator.py`). The relisting lists each namespace's pods
every 10 s; the first listing that succeeds after refused ones now wakes the namespace's
consumers. On fake time, over the in-memory API.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer.handlers.cache import relisting, rosters
from tests.handlers.test_relisting_faults import SINCE, THROTTLED, follow
from tests.support import fakes

pytestmark = pytest.mark.looptime

TURNS_REFUSED = 3


async def test_the_first_listing_after_a_refusal_wakes_the_namespaces_consumers() -> None:
    kube = fakes.FakeKube()
    kept = rosters.Rosters()
    kube.add_pod("shop", "orders-0", labels={"app": "orders"}, since=SINCE)
    follow(kept, "shop")
    woken: list[Any] = []
    listing = relisting.Relisting(kube, kept, wake=woken.append)
    await listing.relist()  # the rosters take what the API server has
    woken.clear()
    await listing.relist()
    assert woken == []  # nothing new: nobody woken
    kube.fail("list_pods", THROTTLED, times=TURNS_REFUSED)  # refused at three turns
    listing.start()
    try:
        await asyncio.sleep(TURNS_REFUSED * relisting.RELIST_SECONDS + 1)
        assert woken == []  # refused: nothing to say to the consumers yet
        await asyncio.sleep(relisting.RELIST_SECONDS)
        # Listed again, nothing changed in it: its consumers are woken all the same, once.
        assert woken == [("shop", "orders")]
        await asyncio.sleep(3 * relisting.RELIST_SECONDS)
        assert woken == [("shop", "orders")]
    finally:
        listing.stop()
