"""A pod whose Event Hubs refuses every connection (a namespace's firewall, a private
endpoint gone, a network outage), through the unmodified SDK on the local stack: its log says
so in a few lines, not one per partition at every reopen and every restart.

Before, a pod of 16 partitions behind a refused port wrote 640 lines at WARNING and ERROR in
two minutes (each partition's six reopens, its failure and its restart, over and over), and
949 at INFO and above. Now each kind of line is said for the first partition, then once for
those failing together, again as their number doubles (`adapters.sharedlines`): 10 lines
at WARNING and ERROR in the same two minutes. The reopens' backoff is shortened here, so that
every partition fails several times over in seconds.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest

from eventhub_balancer.adapters import receiving
from eventhub_balancer.consumer import partitions, restarts
from tests.support.consumerfakes import Recorder, configmap, eventually
from tests.support.fixtures.consumer import running_pod

#: What a partition's take-up line says (`partitions.TAKEN_UP`).
TAKEN_UP = ": processing with epoch "
BATCH = partitions.BatchSettings(
    batch_size=100, max_wait=0.1, retry_backoff=0.05, release_timeout=5.0
)
PARTITIONS = 16
#: Long enough for every partition's reopens to fail over and over (its restarts after 1, 2,
#: 4 and 8 s of backoff).
OUTAGE_S = 20.0


def refused_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture(autouse=True)
def quick_reopens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_S", 0.05)
    monkeypatch.setattr(receiving, "REOPEN_BACKOFF_MAX_S", 0.1)


async def test_a_pod_whose_event_hubs_refuses_says_so_in_a_few_lines(
    azurite: Any, blob_container: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="eventhub_balancer")
    refused = (
        f"Endpoint=sb://127.0.0.1:{refused_port()};SharedAccessKeyName=k;"
        "SharedAccessKey=a2V5;UseDevelopmentEmulator=true"
    )
    async with running_pod(
        pod="pod-a",
        eventhub_connection_string=refused,
        blob_connection_string=azurite.connection_string,
        batch=BATCH,
        processor=Recorder(),
    ) as (pod, source):
        owned = {str(p): (1, "owned") for p in range(PARTITIONS)}
        source.put(configmap(1, owned, checkpointContainer=blob_container.container_name))
        await eventually(
            lambda: len(source.reports) == PARTITIONS, within=OUTAGE_S, what="all reported"
        )
        # Every partition stays reported throughout: an empty batch while the link never
        # opened used to count as an answer, and the reports went away after each restart.
        gaps: set[str] = set()
        for _ in range(int(OUTAGE_S / 0.25)):
            await asyncio.sleep(0.25)
            gaps.update(str(p) for p in range(PARTITIONS) if str(p) not in source.reports)
        assert not gaps, f"partitions {sorted(gaps, key=int)} went unreported in the outage"
        assert {r.state for r in source.reports.values()} == {"failing"}
        assert pod.ready()[0] is True
    product = [r for r in caplog.records if r.name.startswith("eventhub_balancer")]
    loud = [r for r in product if r.levelno >= logging.WARNING]
    reopens = [r.getMessage() for r in loud if r.name == receiving.logger.name]
    failures = [r.getMessage() for r in loud if r.name == restarts.logger.name]
    assert len(loud) == len(reopens) + len(failures), [r.getMessage() for r in loud]
    # The first partition's own line, then one for 2, 4, 8 and 16 failing together.
    for said in (reopens, failures):
        assert len(said) == 5, said
        assert said[-1].startswith(f"{PARTITIONS} partitions "), said[-1]
    assert reopens[-1].startswith(
        "16 partitions fail to receive and reopen their links together, last:"
    )
    assert failures[-1].startswith("16 partitions failed on Event Hubs together, each restarting ")
    # Every partition failed over and over meanwhile: each time said at DEBUG.
    quiet = [r for r in product if r.levelno == logging.DEBUG and "reopen 1/6" in r.getMessage()]
    assert len(quiet) >= 3 * PARTITIONS
    # Each partition said "processing" at INFO as it first took its partition up; its restarts
    # in the outage say it at DEBUG (the first partition's own, before a second failed, aside).
    take_ups = [r for r in product if TAKEN_UP in r.getMessage()]
    said = [r for r in take_ups if r.levelno >= logging.INFO]
    assert PARTITIONS <= len(said) <= PARTITIONS + 2, [r.getMessage() for r in said]
    assert len(take_ups) - len(said) >= 2 * PARTITIONS
