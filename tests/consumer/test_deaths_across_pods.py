"""A batch whose handler kills the process, in a cluster's timing, on fake time against the
in-memory fakes: the test plays the kubelet (it restarts a dead container after 10 s, 20 s,
40 s ... up to 300 s, and forgets a pod's back-off once its container ran for 10 minutes)
and the operator (a pod NotReady for longer than ``podGraceSeconds``, 20 s by default, has
its partition moved to the other pod at the next epoch; a pod that restarted gets nothing
new until it has been Ready for ``podGraceSeconds``). A container turns Ready ``STARTUP_S``
after it starts.

With the counting in the pod only, each pod counted about two deaths before the partition
moved, and the next owner started again from 1: the event walked between the pods for ever.
The deaths now travel with the partition, in its checkpoint blob.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.consumer import crashmarkers, runtime
from eventhub_balancer.contracts import checkpointblobs, failurepolicy
from tests.consumer import policyfakes
from tests.consumer.test_crash_markers import BATCH, Killer, died
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime

#: The kubelet's restart back-off (seconds): 10 doubling to 300, reset after 10 minutes up.
BACKOFF_S, BACKOFF_MAX_S, BACKOFF_RESET_S = 10.0, 300.0, 600.0
#: The operator's default podGraceSeconds.
GRACE_S = 20.0
#: From a container's start to its Ready (imports, the assignment, the fence).
STARTUP_S = 3.0
#: The deaths the test waits for at most before it says the batch was never contained.
DEATHS_BOUND = 40
POISON = ("0", 12)  # in the batch 10-19


@dataclasses.dataclass
class Pod:
    name: str
    markers: Path
    restarts: int = 0
    started_at: float = 0.0
    ready_at: float = 0.0


@dataclasses.dataclass
class Outcome:
    deaths: int
    owners: list[str]  # the pod of each epoch, in order
    attempts: list[int]  # the attempt of each death
    seconds: float  # from the first death to the batch contained
    report: Any


def assignment(pod: str, epoch: int, processing: dict[str, object]) -> dict[str, Any]:
    body = consumerfakes.configmap(
        epoch, {"0": (epoch, "owned")}, processing=json.dumps(processing)
    )
    body["data"]["pod"] = pod
    body["metadata"]["name"] = f"ehb-orders-{pod}"
    return body


def is_parked(source: runtime.assignments.MemorySource) -> bool:
    report = source.reports.get("0")
    return report is not None and report.state == "parked"


async def until_contained(
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore,
    tmp_path: Path,
    processing: dict[str, object],
) -> Outcome:
    """Run the poison batch through pods a and b until a process parks it (or the bound)."""
    pods = {n: Pod(n, tmp_path / n) for n in ("pod-a", "pod-b")}
    owner, epoch = pods["pod-a"], 1
    owners, attempts = [owner.name], []
    first_death: float | None = None
    loop = asyncio.get_running_loop()
    while len(attempts) < DEATHS_BOUND:
        killer = Killer(poison={POISON})
        source = runtime.assignments.MemorySource()
        consumer = runtime.Runtime(
            settings=runtime.RuntimeSettings(consumer="orders", pod=owner.name, batch=BATCH),
            source=source,
            backends=policyfakes.Backends({"orders": (hub, store.handle(owner.name))}),
            processor=killer,
            exit_process=lambda reason: None,
            crash_markers=crashmarkers.CrashMarkers(
                owner.markers, pod=owner.name, pod_uid=f"uid-{owner.name}"
            ),
        )
        task = asyncio.create_task(consumer.run())
        source.put(assignment(owner.name, epoch, processing))
        parked = asyncio.create_task(
            consumerfakes.eventually(
                functools.partial(is_parked, source),
                within=60,
            )
        )
        death = asyncio.create_task(killer.died.wait())
        await asyncio.wait({parked, death}, return_when=asyncio.FIRST_COMPLETED)
        if parked.done() and not parked.exception():
            death.cancel()
            report = source.reports["0"]
            consumer.request_shutdown()
            await task
            assert first_death is not None
            return Outcome(len(attempts), owners, attempts, loop.time() - first_death, report)
        parked.cancel()
        assert killer.died.is_set(), "neither parked nor dead"
        attempts += killer.attempts("0")
        now = loop.time()
        first_death = now if first_death is None else first_death
        await died(consumer, owner.markers)
        await asyncio.gather(task, return_exceptions=True)
        # The kubelet: the next start of this container, and when it is Ready again.
        if now - owner.started_at >= BACKOFF_RESET_S:
            owner.restarts = 0
        restart_at = now + min(BACKOFF_S * 2**owner.restarts, BACKOFF_MAX_S)
        owner.restarts += 1
        owner.started_at, owner.ready_at = restart_at, restart_at + STARTUP_S
        if owner.ready_at - now <= GRACE_S:
            await asyncio.sleep(owner.ready_at - loop.time())  # Ready in time: it keeps it
            continue
        # The operator: NotReady past the grace, the partition moves at the next epoch, to
        # the other pod once it is off its probation.
        other = next(p for p in pods.values() if p is not owner)
        move_at = max(now + GRACE_S, other.ready_at + GRACE_S)
        await asyncio.sleep(move_at - loop.time())
        owner, epoch = other, epoch + 1
        owners.append(owner.name)
    raise AssertionError(
        f"not contained after {len(attempts)} deaths on {len(set(owners))} pods: attempts "
        f"{attempts}, owners by epoch {owners}"
    )


async def test_with_the_defaults_a_batch_that_kills_its_process_is_parked_across_two_pods(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore, tmp_path: Path
) -> None:
    """The defaults: maxAttempts 10, park. Before, each owner counted from 1 and the attempts
    went 1, 2, 1, 2, ... between the pods for ever."""
    fake_hub.append("0", 30)
    outcome = await until_contained(fake_hub, fake_store, tmp_path, {})
    print(
        f"contained after {outcome.deaths} deaths on {len(set(outcome.owners))} pods, "
        f"{len(outcome.owners)} owners, {outcome.seconds:.0f} s after the first death; "
        f"attempts {outcome.attempts}; owners {outcome.owners}"
    )
    assert outcome.deaths == failurepolicy.Processing().max_attempts
    assert outcome.attempts == list(range(1, outcome.deaths + 1))
    assert outcome.report.attempts == outcome.deaths
    assert fake_store.blobs["0"].sequence_number == 9  # parked: never past the batch
    # One write before each attempt after a death, and one to drop the count at the park
    # (its next owner tries the batch again).
    assert fake_store.deaths_written == [
        ("0", checkpointblobs.Deaths(first=10, attempts=n)) for n in range(2, 11)
    ] + [("0", None)]
    assert fake_store.blobs["0"].deaths is None
    assert outcome.report.error.startswith("ProcessDied: attempt 10 never ended on the")


async def test_a_carried_count_is_said_once_not_at_every_batch_after_its_own(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The previous owner left a count on the batch from 10; the new owner counts it, the
    batch then succeeds and the partition goes on. Before, every later batch of the epoch
    logged at INFO that the checkpoint counted attempts of another batch: one line per batch
    per partition, for as long as the pod owned it."""
    fake_hub.append("0", 200)
    fake_store.blobs["0"] = consumerfakes.FakeCheckpoint(
        9, "9", 1, "pod-b", checkpointblobs.Deaths(first=10, attempts=2)
    )
    caplog.set_level(logging.INFO, logger="eventhub_balancer.consumer")
    recorder = Killer(poison=set())
    source = runtime.assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(consumer="orders", pod="pod-a", batch=BATCH),
        source=source,
        backends=policyfakes.Backends({"orders": (fake_hub, fake_store.handle("pod-a"))}),
        processor=recorder,
        exit_process=lambda reason: None,
        crash_markers=crashmarkers.CrashMarkers(tmp_path, pod="pod-a", pod_uid="uid-a"),
    )
    task = asyncio.create_task(consumer.run())
    source.put(assignment("pod-a", 2, {}))
    await consumerfakes.eventually(lambda: fake_store.blobs["0"].sequence_number == 199)
    consumer.request_shutdown()
    await task
    assert [c.attempt for c in recorder.contexts if c.first_sequence_number == 10] == [3]
    assert fake_store.blobs["0"].deaths is None
    about_deaths = [r for r in caplog.records if "sequence number 10" in r.getMessage()]
    assert len(about_deaths) == 1, [r.getMessage() for r in about_deaths]
