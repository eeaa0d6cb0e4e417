"""`changes.NamespaceChanges`: the scenario runner looks again at each change of the namespace's
Pods and ConfigMaps, on the local API server (the real one serves the same watch)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client as k8s

from eventhub_balancer_devstack.scenarios import changes

NS = "changes"


def test_a_change_wakes_the_runner_and_quiet_does_not(kube_client: Any) -> None:
    core = k8s.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": NS}})
    watched = changes.NamespaceChanges(kube_client, NS)
    watched.start()
    try:
        # The watches start by listing what is there: nothing, in a fresh namespace, but the
        # first look may still come; then quiet is quiet.
        watched.wait(1.0)
        assert watched.wait(0.3) is False

        def later() -> None:
            time.sleep(0.2)
            core.create_namespaced_config_map(NS, {"metadata": {"name": "m"}})

        writer = threading.Thread(target=later)
        writer.start()
        assert watched.wait(5.0) is True
        writer.join()
        core.create_namespaced_pod(
            NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        )
        assert watched.wait(5.0) is True
    finally:
        began = time.monotonic()
        watched.stop()
    assert time.monotonic() - began < 2.0  # a stop does not wait for the watches to time out
