"""A watch resumed after etcd's compaction is answered 410 Gone, and the operator recovers.

The operator reaches the real API server through an outage proxy (`realkube.outages`). While
it is cut off, a member pod is deleted, a new one joins, and etcd's history is compacted
through etcd's own API. When the outage ends, kopf resumes its watches from resourceVersions
that no longer exist: the real server answers 410 Gone (the watch cache is off for the kinds
the operator watches, so the resume goes to etcd as it does once a cluster's watch cache has
moved on), kopf lists again, and the operator moves the deleted pod's partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from eventhub_balancer_devstack.realkube import RealControlPlane, outages
from tests.support.fixtures.operator import HUB, ConsumerDouble, Stack, wait_for

#: Off for the kinds the operator watches: a resume from a compacted version then meets etcd.
NO_WATCH_CACHE = (
    "--watch-cache-sizes=pods#0,configmaps#0,eventhubconsumers.eventhub-balancer.dev#0,"
    "leases.coordination.k8s.io#0"
)
WAIT_S = 30.0


@pytest.fixture(scope="module")
def uncached_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealControlPlane]:
    with RealControlPlane(
        folder=tmp_path_factory.mktemp("controlplane"), apiserver_flags=(NO_WATCH_CACHE,)
    ) as plane:
        yield plane


def test_a_resume_after_compaction_is_gone_and_the_operator_lists_again(
    uncached_kube: RealControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kube, ns = uncached_kube, "shop"
    emulator = EventHubsEmulator(hubs={HUB: 8})
    emulator.start_in_thread()
    proxy = outages.OutageProxy(int(kube.url.rsplit(":", 1)[1])).start()
    kubeconfig = kube.write_kubeconfig(tmp_path / "operator.kubeconfig")
    text = kubeconfig.read_text().replace(kube.url, proxy.url)
    kubeconfig.write_text(text)
    stack = Stack(kube, emulator, kubeconfig)  # type: ignore[arg-type]
    try:
        stack.secret(ns)
        stack.consumer(ns)
        for name in ("c-0", "c-1"):
            stack.pod(ns, name)
        caplog.set_level(logging.DEBUG, logger="kopf")
        stack.start_operator(clusterwide=True, refresh_seconds=1.0)
        with ConsumerDouble(stack.kube, ns):  # type: ignore[arg-type]
            wait_for(
                lambda: sorted(stack.counts(ns).values()) == [4, 4] and stack.balanced(ns),
                timeout=WAIT_S,
                what="2 x 4",
            )
            victim = set(stack.assignment(ns)["c-1"])
            proxy.cut()
            stack.delete_pod(ns, "c-1")
            stack.pod(ns, "c-2")
            revision = kube.compact()
            assert revision > 0
            proxy.restore()
            wait_for(
                lambda: (
                    set(stack.maps(ns)) == {"c-0", "c-2"}
                    and sorted(stack.counts(ns).values()) == [4, 4]
                    and stack.balanced(ns)
                ),
                timeout=WAIT_S,
                what="the deleted pod's partitions moved after the outage",
            )
            assert victim <= set().union(*(set(p) for p in stack.assignment(ns).values()))
        assert proxy.closed > 0
        restarts = [r for r in caplog.records if "Restarting the watch-stream" in r.getMessage()]
        assert restarts, "no watch was answered 410 Gone"
    finally:
        for operator in list(stack.operators):
            operator.stop()
        proxy.stop()
        emulator.stop_in_thread()
