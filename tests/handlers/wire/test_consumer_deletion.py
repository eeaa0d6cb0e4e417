"""A consumer deleted while the operator runs: kopf's finalizer comes off as soon as its daemon
has stopped, so ``kubectl delete ehc`` and ``kubectl delete namespace`` wait no longer than
the cycle in flight.

A namespace being deleted loses the consumer's pods and the consumer together, so the pods'
deletion has usually woken a cycle when the consumer's own deletion arrives. kopf waited for
the daemon only a few turns of the loop, and then came back to it at the end of its
cancellation backoff (`kopfwiring.CYCLE_FINISH_SECONDS`): the finalizer stayed 5 s after a
cycle of 0.1 s had ended, and the namespace controller, polling with a growing backoff, kept
the namespace Terminating 8 s longer on the real control plane.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from eventhub_balancer.handlers import cycles
from tests.support.fixtures.operator import CR, Stack, wait_for

#: How long the cycle in flight at the deletion takes (a loaded machine's, or one that waits
#: on Event Hubs a little).
CYCLE_S = 0.5
#: The cycle ends, the daemon stops, and the finalizer comes off in the same pass of kopf's.
GONE_WITHIN_S = CYCLE_S + 1.5


def test_a_consumer_deleted_during_a_cycle_loses_its_finalizer_once_the_cycle_ends(
    operator_stack: Stack, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, ns = operator_stack, namespace
    slow, started = threading.Event(), threading.Event()
    run_cycle = cycles.run_cycle

    async def slow_cycle(**kwargs: Any) -> cycles.Result:
        if slow.is_set():
            started.set()
            await asyncio.sleep(CYCLE_S)
        return await run_cycle(**kwargs)

    monkeypatch.setattr(cycles, "run_cycle", slow_cycle)
    stack.secret(ns)
    stack.consumer(ns)
    stack.pod(ns, "c-0")
    operator = stack.start_operator(namespaces=(ns,))
    wait_for(lambda: stack.balanced(ns), what="balanced")

    slow.set()
    stack.pod(ns, "c-1")  # wakes a cycle
    assert started.wait(timeout=10.0), "no cycle started"
    deleted = time.monotonic()
    stack.kube.delete_object(CR, "orders", namespace=ns)
    wait_for(
        lambda: stack.kube.get_object(CR, "orders", namespace=ns) is None,
        timeout=15.0,
        what="the consumer gone",
    )
    took = time.monotonic() - deleted
    assert not operator.runtime.consumers
    assert took < GONE_WITHIN_S, f"the consumer stayed {took:.1f} s after its deletion"
