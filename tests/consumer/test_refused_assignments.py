"""A pod whose ServiceAccount the API server refuses while it runs (its RoleBinding pruned,
its ServiceAccount deleted and created again), on fake time: it goes on with the partitions
it has, its epochs fencing it out of whatever moves meanwhile, and says the truth on
/readyz: it cannot read its assignment, so that the operator hands its partitions to pods
that can. Before, the third refusal ended the runtime: every partition released, the process
exited, and the container crash-looped until the RoleBinding was back, and after.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client import exceptions as k8s_errors

from tests.support import consumerfakes
from tests.support.configmapfakes import FakeConfigMaps, operators, running

pytestmark = pytest.mark.looptime


@pytest.mark.parametrize(
    ("status", "fix"),
    [(403, "RoleBinding"), (401, "delete the pod")],
)
async def test_a_refused_pod_goes_on_and_is_not_ready_until_it_may_read_again(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    status: int,
    fix: str,
) -> None:
    fake_hub.append("0", 5)
    maps = FakeConfigMaps()
    async with running(maps, fake_hub, fake_store) as pod:
        maps.write(operators(1, {"0": (1, "owned")}))
        await consumerfakes.eventually(lambda: pod.ready() == (True, "generation 1 applied"))
        refused = k8s_errors.ApiException(status=status, reason="refused")
        for attempt in range(3):  # the watch's requests, refused in a row
            maps.reconnects.after_failure(refused, now=float(attempt))
        ready, reason = pod.ready()
        assert not ready
        assert f"HTTP {status}" in reason
        assert fix in reason
        # Still processing what it was given.
        fake_hub.append("0", 5)
        processor = pod.processor
        assert isinstance(processor, consumerfakes.Recorder)
        await consumerfakes.eventually(lambda: len(processor.done) >= 10, what="the new events")
        assert pod.owned() == {"0": 1}
        # NotReady past podGraceSeconds: the operator hands 0 on at epoch 2, unseen by the
        # pod, whose link the new owner's takes: it stops there, with nothing more handled.
        fake_hub.claim("0", 2)
        await consumerfakes.eventually(lambda: not pod.workers, what="partition 0 stopped")
        handled = len(processor.done)
        fake_hub.append("0", 5)
        await asyncio.sleep(5)
        assert len(processor.done) == handled
        maps.reconnects.reachable(now=10.0)  # a list answered: access is back
        maps.write(operators(2, {}))  # what the operator wrote meanwhile
        await consumerfakes.eventually(lambda: pod.ready() == (True, "generation 2 applied"))
