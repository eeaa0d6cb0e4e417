"""The balancing systems a scenario can run, and what "balanced" means for them.

A system supplies the pods' command (what the local kubelet runs) and a `Snapshot` of who
holds which partition. Balanced has one definition for both systems, the strict one: every
partition is held by a pod that should hold it (it exists, is not being deleted, and is
Ready), each such pod holds floor(P/N) or ceil(P/N), nothing is in flight (no hand-off, no
two receivers on one partition), and each holder has actually taken its partitions up (ours:
applied its latest generation; the SDK: its ownership is current and its receiver is open).

`operatorsystems.OursSystem` is eventhub-balancer: the operator in a thread and ``ehb
consume`` pods; `sdkbalancing.SdkSystem` (in ``eventhub_balancer_devstack/sdkbalancing.py``)
is the SDK's EventProcessorClient workers. What both share is here: the `Site`, the
`Snapshot` and its verdict (`judge`), and the pods' environment.
"""

from __future__ import annotations

import dataclasses
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from eventhub_balancer import runners
from eventhub_balancer.adapters import blobs
from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack import kubelet, recording
from eventhub_balancer_devstack.stacks import LocalStack

logger = logging.getLogger(__name__)

CR = f"{specs.GROUP}/{specs.VERSION}/{specs.PLURAL}"
#: The Event Hubs namespace the checkpoint blobs are named after (the CR's
#: ``fullyQualifiedNamespace``); fixed, so that the blob names do not depend on a port.
FULLY_QUALIFIED_NAMESPACE = "demo.servicebus.windows.net"
CONSUMER_GROUP = "$Default"
#: Events per micro-batch, the same for both systems.
BATCH_SIZE = 100
#: Seconds a batch waits for more events after its first: short, for a lively view.
MAX_WAIT_S = 0.2
#: A pod's graceful shutdown budget, below its termination grace period.
SHUTDOWN_TIMEOUT_S = 10.0
TERMINATION_GRACE_S = 15.0
#: How long a look at a pod's /readyz may take (the runner polls every 0.1 s: keep it short;
#: a pod that answers slower is not counted as up yet, and is looked at again).
READYZ_TIMEOUT_S = 1.0
#: What our runtime's /readyz answers before it has read its assignment ConfigMap.
NO_ASSIGNMENT_YET = "no assignment read yet"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Site:
    """Where a system runs: the stack, its namespace and hub, and the scenario's files."""

    stack: LocalStack
    loop: runners.BackgroundLoop
    namespace: str
    hub: str
    consumer: str
    container: str
    record_dir: Path
    log_dir: Path
    #: What the pods (and the operator) use for Blob Storage: Azurite, or a fault proxy.
    blob_connection_string: str
    interval_seconds: int

    @property
    def kubeconfig(self) -> Path:
        assert self.stack.kubeconfig is not None, "the stack is not started"
        return self.stack.kubeconfig

    @property
    def eventhubs_connection_string(self) -> str:
        return self.stack.eventhubs_connection_string

    def partitions(self) -> list[str]:
        return self.stack.eventhubs.partition_ids(self.hub)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    partitions: tuple[str, ...]
    #: The pods that should share the partitions (exist, not deleting), and which are Ready.
    members: tuple[str, ...]
    ready: frozenset[str]
    #: partition -> the pod that holds it and has taken it up.
    owners: Mapping[str, str]
    #: Hand-offs in flight (ours) or partitions with more than one receiver (SDK).
    in_flight: int
    #: Pods that have not taken up what they hold yet (receivers not open).
    pending: frozenset[str]
    balanced: bool
    reason: str

    def counts(self) -> dict[str, int]:
        result = dict.fromkeys(self.members, 0)
        for pod in self.owners.values():
            result[pod] = result.get(pod, 0) + 1
        return result


def judge(
    *,
    partitions: Sequence[str],
    members: Sequence[str],
    ready: frozenset[str],
    owners: Mapping[str, str],
    in_flight: int,
    pending: Sequence[str] = (),
) -> Snapshot:
    """The snapshot with its verdict; ``pending`` lists pods that have not taken up theirs."""
    reason = ""
    if not members:
        reason = "no pods"
    elif not_ready := sorted(set(members) - ready):
        reason = f"not ready: {', '.join(not_ready)}"
    elif unowned := [p for p in partitions if owners.get(p) not in members]:
        reason = f"{len(unowned)} partitions without a member"
    elif in_flight:
        reason = f"{in_flight} in flight"
    elif pending:
        reason = f"not applied yet: {', '.join(sorted(pending))}"
    else:
        low, high = len(partitions) // len(members), -(-len(partitions) // len(members))
        counts = dict.fromkeys(members, 0)
        for partition in partitions:
            counts[owners[partition]] += 1
        if not all(low <= n <= high for n in counts.values()):
            reason = f"uneven: {sorted(counts.values())}"
    return Snapshot(
        partitions=tuple(partitions),
        members=tuple(members),
        ready=ready,
        owners=dict(owners),
        in_flight=in_flight,
        pending=frozenset(pending),
        balanced=not reason,
        reason=reason or "balanced",
    )


def taken_over(snapshot: Snapshot, partitions: Iterable[str], *, gone: str | None) -> bool:
    """Every one of ``partitions`` is held, and taken up, by a Ready pod other than ``gone``.

    The failover criterion: the partitions of a deleted pod (``gone`` = its name) or of a
    killed one (``gone`` = None: its restarted process may take them up again) are being
    processed again.
    """
    for partition in partitions:
        pod = snapshot.owners.get(partition)
        if pod is None or pod == gone or pod not in snapshot.ready or pod in snapshot.pending:
            return False
    return True


def answers_readyz(port: int, *, not_yet: str = "") -> bool:
    """The process on ``port`` serves /readyz (Ready or not), and its answer does not start
    with ``not_yet`` (a process that has not reached its coordination service yet)."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/readyz", timeout=READYZ_TIMEOUT_S
        ) as response:
            body = response.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
    except (OSError, ValueError):
        return False
    return not (not_yet and body.startswith(not_yet))


class System(Protocol):
    label: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def template(self) -> kubelet.PodTemplate: ...

    def attach(self, pods: kubelet.LocalKubelet) -> None: ...

    def snapshot(self, *, members: Sequence[str], ready: frozenset[str]) -> Snapshot: ...

    def up(self, port: int) -> bool:
        """The pod's process on ``port`` has started and reached what coordinates it (ours:
        read its assignment ConfigMap; the SDK: started its EventProcessor). Time to balance
        is measured from the moment every pod of a step is up."""
        ...


def record_env(site: Site) -> dict[str, str]:
    """The environment every consumer process gets, whichever system it belongs to."""
    return {
        "EHB_EVENTHUB_CONNECTION_STRING": site.eventhubs_connection_string,
        "EHB_BLOB_CONNECTION_STRING": site.blob_connection_string,
        # The local emulators listen on loopback: allowed only when said so.
        "EHB_ALLOW_DEVELOPMENT_ENDPOINTS": "true",
        recording.ENV_RECORD_DIR: str(site.record_dir),
        "KUBECONFIG": str(site.kubeconfig),
        # Consumers log at INFO to their files; the demo's own terminal stays clean.
        "PYTHONUNBUFFERED": "1",
    }


async def ensure_container(connection_string: str, name: str) -> None:
    async with blobs.open_container(container_name=name, connection_string=connection_string) as c:
        await blobs.ensure_container(c)
