"""A consumer pod paused for a few seconds at a time (CPU throttling, a GC or driver pause, a
frozen container), with the real operator and ``ehb consume`` processes on the local stack:
SIGSTOP for 4 s, then SIGCONT, every 10 s. Its probes answer late but within the kubelet's
failure window, so the pod stays Ready, keeps its partitions at their epochs, and nothing is
processed twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.consumer.wire import test_scaling as scaling
from tests.support.fixtures.operator import wait_for

pytestmark = pytest.mark.slow

PAUSE_S = 4.0
EVERY_S = 10.0
#: Twice: the second pause finds the pod as the first left it (nothing counted across them).
PAUSES = 2
#: Bursts of events, spread over the pauses.
ROUNDS = 10


def owners(stack: Any) -> dict[str, tuple[str, int, str]]:
    """partition -> (pod, epoch, state), as the ConfigMaps say."""
    return {
        partition: (pod, entry.epoch, entry.state)
        for pod, entries in stack.assignment(scaling.NAMESPACE).items()
        for partition, entry in entries.items()
    }


def test_a_pod_paused_for_seconds_at_a_time_keeps_its_partitions(
    tmp_path: Path, azurite: Any
) -> None:
    with scaling.running_stack(tmp_path, azurite, partitions_=4) as running:
        stack, consumers, watch, cs = running
        consumers.handler_seconds = 0.05
        total = 4 * 1_000
        # Events arrive all through the pauses (the rounds span them), and no longer: paced
        # by a pause after each send, they went on 18 s past the last one.
        producer = scaling.produce(
            cs, total, rounds=ROUNDS, partitions_=4, every=PAUSES * EVERY_S / ROUNDS
        )
        for pod in ("p1", "p2"):
            consumers.start(pod)
        wait_for(lambda: scaling.owned_counts(stack) == [2, 2], timeout=60, what="2 pods, 2 each")
        before = owners(stack)
        seen: list[dict[str, tuple[str, int, str]]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.2):
                try:
                    seen.append(owners(stack))
                except Exception:  # an API read cut short: the next sample counts
                    continue

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        pid = consumers.processes["p2"].pid
        try:
            for _ in range(PAUSES):
                os.kill(pid, signal.SIGSTOP)
                time.sleep(PAUSE_S)
                os.kill(pid, signal.SIGCONT)
                time.sleep(EVERY_S - PAUSE_S)
        finally:
            os.kill(pid, signal.SIGCONT)
            stop.set()
            sampler.join(5)
        producer.join(timeout=120)
        assert not producer.is_alive()
        wait_for(lambda: len(consumers.processed()) >= total, timeout=120, what="every event")
        processed = consumers.processed()
        assert set(processed) == {(str(p), n) for p in range(4) for n in range(total // 4)}
        assert {k: n for k, n in processed.items() if n > 1} == {}
        assert seen
        assert [s for s in seen if s != before][:3] == []
        assert consumers.ready["p2"]
        assert watch.regressions == []
