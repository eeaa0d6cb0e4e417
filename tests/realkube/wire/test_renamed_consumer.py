"""A consumer release renamed (``consumer.name`` changed in a ``helm upgrade``) on the real
control plane, paused first as docs/operations.md says, measured as its user meets it.

The new name makes a new EventHubConsumer and deletes the old one, and the pods roll (their
``EHB_CONSUMER`` changes). The old consumer's pods keep what their ConfigMaps say, so without
the pause the new consumer takes every partition from them with no hand-off: in a probe of
this scenario unpaused, 4 of 1,344 events were processed twice and 3 partitions stopped
without a final checkpoint. Paused first (``consumer.paused=true``, then ``Paused``), every pod
released its partitions with a final checkpoint before the rename, so the new consumer's pods
start where the old ones ended: no event twice or lost, and none processed by an old pod.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from eventhub_balancer_devstack import deployments
from eventhub_balancer_devstack.realkube import RealControlPlane, nodes
from tests.install import test_consumer_chart as consumer_chart
from tests.realkube.wire.test_rollouts import (
    NAMESPACE,
    PARTITIONS,
    _producer,
    _records,
    all_processed,
    install_release,
    twice_and_lost,
)
from tests.support import charts
from tests.support.fixtures.realkube import Kubectl

OLD = "orders-eventhub-consumer"
NEW = "orders-renamed"
REPLICAS = 2
#: Bounds on waits the steps normally finish in seconds.
STEADY_S = 120.0
SETTLE_S = 60.0


def steady(records: Path, *, pods_not: set[str] | frozenset[str] = frozenset()) -> bool:
    """Every partition processed in the last 3 s, by REPLICAS pods none of which is in
    ``pods_not``."""
    recent = [r for r in _records(records) if r[0] > time.time() - 3]
    pods = {r[1] for r in recent}
    return (
        len({r[2] for r in recent}) == len(PARTITIONS)
        and len(pods) == REPLICAS
        and not (pods & pods_not)
    )


def wait_until(check: Callable[[], bool], bound_s: float, what: str) -> None:
    deadline = time.monotonic() + bound_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {bound_s} s")
        time.sleep(0.5)


def test_a_paused_consumer_renamed_moves_each_partition_once_without_duplicates(
    consumer_emulator: Any,
    azurite: Any,
    blob_container: Any,
    real_kube: RealControlPlane,
    real_kubeconfig: Path,
    real_kubectl: Kubectl,
    local_node_factory: Callable[[Mapping[str, deployments.LocalImage]], nodes.LocalNode],
    tmp_path: Path,
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    install_release(
        kubectl=real_kubectl,
        kubeconfig=real_kubeconfig,
        local_node_factory=local_node_factory,
        home=tmp_path,
        eventhub=consumer_emulator.connection_string(),
        blob=azurite.connection_string,
        container=blob_container.container_name,
        records=records,
        replicas=REPLICAS,
    )
    stop = threading.Event()
    sent: dict[str, int] = collections.Counter()
    producer = threading.Thread(
        target=_producer, args=(consumer_emulator.connection_string(), stop, sent), daemon=True
    )
    producer.start()
    try:
        wait_until(lambda: steady(records), STEADY_S, "steady")
        env = {"KUBECONFIG": str(real_kubeconfig), "HOME": str(tmp_path)}
        values = json.loads(
            charts.helm("get", "values", "orders", "-n", NAMESPACE, "-o", "json", env=env)
        )
        upgrade = ("upgrade", "orders", str(consumer_chart.CHART_DIR), "-n", NAMESPACE)
        values["consumer"]["paused"] = True
        charts.helm(*upgrade, values=values, env=env)
        real_kubectl(
            "-n", NAMESPACE, "wait", f"ehc/{OLD}", "--for=condition=Paused",
            f"--timeout={SETTLE_S:.0f}s",
        )  # fmt: skip
        renamed = time.time()
        old_pods = {r[1] for r in _records(records)}
        values["consumer"]["paused"] = False
        values["consumer"]["name"] = NEW
        charts.helm(*upgrade, values=values, env=env)
        wait_until(lambda: steady(records, pods_not=old_pods), STEADY_S, "steady on new pods")
    finally:
        stop.set()
        producer.join(30)

    # Every event sent is processed once: wait (bounded) for the last ones.
    wait_until(lambda: all_processed(records, sent), SETTLE_S, "every event processed")
    recs = _records(records)
    twice, lost = twice_and_lost(recs, sent)
    after = [r for r in recs if r[0] >= renamed]
    back = sorted({f"{r[2]} on {r[1]}" for r in after if r[1] in old_pods})
    owners = {p: len({r[1] for r in after if r[2] == p}) for p in PARTITIONS}
    print(f"renamed after a pause: {sum(sent.values())} sent, {twice} twice, {lost} lost")
    print(f"owners of each partition after the rename: {owners}")
    assert (twice, lost) == (0, 0)
    assert not back, f"processed by an old consumer's pod after the rename: {back}"
    out = real_kubectl("-n", NAMESPACE, "get", "ehc", "-o", "json")
    (consumer,) = json.loads(out.stdout)["items"]
    assert consumer["metadata"]["name"] == NEW
    ready = {c["type"]: c["status"] for c in consumer["status"]["conditions"]}
    assert ready["Ready"] == "True"
