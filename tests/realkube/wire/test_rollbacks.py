"""A rollback to 0.1.0's operator on the real control plane: the conditions it never writes.

0.1.0's operator rewrites the conditions it knows (Ready, Balanced, EventHubReachable,
CheckpointStoreReachable, PartitionsFailing, Paused) in each cycle and keeps every other type
as it finds it. Reconciling and Stalled came after 0.1.0, and Argo CD (the chart's health
check) and Flux (kstatus) read them before the others. Replayed with an operator of the
repository's history from before those two conditions, run as a process after the newer one
(as `helm rollback` does): a consumer the newer operator had found Stalled stayed Degraded in
Argo CD and Failed in Flux for as long as the older operator ran, while that operator
balanced it and wrote Ready True. docs/operations.md ("Rolling back")
gives the command that takes the two conditions off; it runs here as the page writes it.

Here the newer operator is this repository's, and the older one's cycle is its status write:
its own conditions replaced by type, the others kept.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.contracts import conditions
from eventhub_balancer_devstack.eventhubs import EventHubsEmulator
from eventhub_balancer_devstack.realkube import RealControlPlane
from tests.install.test_gitops_health import argo_health, kstatus
from tests.support import paths
from tests.support.fixtures.kube import KUBECTL_TIMEOUT, kubectl_binary
from tests.support.fixtures.operator import CR, HUB, ConsumerDouble, Stack, wait_for

PAGE = paths.REPOSITORY / "docs" / "operations.md"
NAMESPACE = "rolled-back"
WAIT_S = 30.0
#: The conditions 0.1.0's operator writes, as it writes them for a balanced consumer.
#: (type, status, reason, message)
OLDER_CONDITIONS = (
    (conditions.READY, "True", "AllPartitionsOwned", "32 partitions owned"),
    (conditions.BALANCED, "True", "Balanced", "32 partitions over 3 pods"),
    (conditions.EVENTHUB_REACHABLE, "True", "PartitionsListed", "32 partitions"),
    (conditions.CHECKPOINT_STORE_REACHABLE, "False", "SecretNotFound", "no Secret"),
    (conditions.PARTITIONS_FAILING, "False", "AllPartitionsProcessing", "none failing"),
    (conditions.PAUSED, "False", "NotPaused", "not paused"),
)


def documented_commands() -> list[str]:
    """The sh blocks of the page's "Rolling back" section, each one script."""
    section = PAGE.read_text().split("\n## Rolling back\n", 1)
    assert len(section) == 2, f"{PAGE.name} has no 'Rolling back' section"
    body = section[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", body, flags=re.DOTALL)
    assert blocks, f"{PAGE.name}'s 'Rolling back' section gives no command"
    return blocks


def older_operator_cycle(kube: RealControlPlane) -> None:
    """The status write of 0.1.0's operator: its conditions replaced, any other type kept."""
    body = kube.get_object(CR, "orders", namespace=NAMESPACE)
    assert body is not None
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    mine = {type_ for type_, *_ in OLDER_CONDITIONS}
    written = [
        {
            "type": type_,
            "status": status,
            "observedGeneration": body["metadata"]["generation"],
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }
        for type_, status, reason, message in OLDER_CONDITIONS
    ]
    kept = [c for c in body["status"]["conditions"] if c["type"] not in mine]
    kube.patch_object(
        CR,
        "orders",
        {"status": {"conditions": written + kept}},
        namespace=NAMESPACE,
        subresource="status",
    )


@pytest.fixture
def stack(real_kube: RealControlPlane, real_kubeconfig: Path) -> Iterator[Stack]:
    emulator = EventHubsEmulator(hubs={HUB: 32})
    emulator.start_in_thread()
    stack = Stack(real_kube, emulator, real_kubeconfig)  # type: ignore[arg-type]
    try:
        yield stack
    finally:
        for operator in list(stack.operators):
            operator.stop()
        emulator.stop_in_thread()


def health(kube: RealControlPlane) -> tuple[str, str]:
    body: dict[str, Any] | None = kube.get_object(CR, "orders", namespace=NAMESPACE)
    assert body is not None
    return argo_health(body)["status"], kstatus(body)["status"]


def test_the_documented_rollback_leaves_no_condition_the_older_operator_never_rewrites(
    stack: Stack, real_kube: RealControlPlane, real_kubeconfig: Path, tmp_path: Path
) -> None:
    commands = documented_commands()
    jq = shutil.which("jq")
    assert jq is not None, "the page's command needs jq: install it (apt-get install jq)"
    kubectl = kubectl_binary()
    assert kubectl is not None, "no kubectl: install the devstack (pip install -e ./devstack)"
    stack.secret(NAMESPACE)
    # Its checkpoint store's Secret is never created: the newer operator finds it Stalled,
    # which 0.1.0's operator does not count against Ready.
    stack.consumer(NAMESPACE)
    for i in range(3):
        stack.pod(NAMESPACE, f"c-{i}")
    newer = stack.start_operator(namespaces=(NAMESPACE,))
    with ConsumerDouble(stack.kube, NAMESPACE):  # type: ignore[arg-type]
        wait_for(
            lambda: (
                stack.balanced(NAMESPACE)
                and stack.condition(NAMESPACE, "Stalled").get("status") == "True"
            ),
            timeout=WAIT_S,
            what="the newer operator's Stalled",
        )
    stack.stop_operator(newer)
    record = stack.status(NAMESPACE)

    older_operator_cycle(real_kube)
    assert health(real_kube) == ("Degraded", "Failed")

    env = {
        **os.environ,
        "KUBECONFIG": str(real_kubeconfig),
        "HOME": str(tmp_path),
        "PATH": f"{Path(kubectl).parent}:{Path(jq).parent}:{os.environ.get('PATH', '')}",
    }
    # Twice: a second run, with nothing left to take off, must not fail either.
    for command in commands * 2:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, f"{command}: {done.stderr.strip()}"
    assert health(real_kube) == ("Healthy", "Current")
    older_operator_cycle(real_kube)
    assert health(real_kube) == ("Healthy", "Current")
    after = stack.status(NAMESPACE)
    assert {t: after[t] for t in ("epochs", "assignment")} == {
        t: record[t] for t in ("epochs", "assignment")
    }
