"""``ehb checkpoints list NAME``: the events waiting after each checkpoint, on a fake hub; and
what ``ehb checkpoints reset`` skips or replays, counted the same way.

What the hub says is counted as a reset reads it (one management call a partition over one
client); a partition it cannot say is left out and named, and a hub that never answers costs
the listing `checkpointwaits.READ_TIMEOUT_S` in all (on fake loop time). Against the Event Hubs
emulator, Azurite and the local API: tests/adapters/wire/test_checkpoint_reset.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from eventhub_balancer.adapters import checkpointing, checkpointresets, receiving
from eventhub_balancer.cli import checkpointchanges, checkpoints, checkpointwaits
from eventhub_balancer.contracts import checkpointblobs, startpositions
from tests.support import pausedconsumers

ADDRESS = receiving.EventHubAddress(
    fully_qualified_namespace="shop.servicebus.windows.net",
    eventhub_name="orders",
    consumer_group="$Default",
    connection_string="Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=a;"
    "SharedAccessKey=k",
)
NOW = datetime.datetime(2026, 12, 5, tzinfo=datetime.UTC)


def checkpoint(partition: str, sequence_number: int) -> checkpointing.Checkpoint:
    return checkpointing.Checkpoint(
        partition=partition,
        offset="-1",
        sequence_number=sequence_number,
        owner_id="orders-0",
        epoch=1,
        etag="e",
        last_modified=NOW,
    )


def properties(beginning: int, last: int) -> dict[str, Any]:
    return {
        "beginning_sequence_number": beginning,
        "last_enqueued_sequence_number": last,
        "last_enqueued_offset": str(last * 100),
        "is_empty": last < beginning,
    }


class Hub:
    """A hub client: each partition's properties, a failure, or no answer at all."""

    def __init__(self, answers: Mapping[str, dict[str, Any] | Exception | None]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.at_once = self.most_at_once = 0

    async def get_partition_properties(self, partition: str) -> dict[str, Any]:
        self.asked.append(partition)
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            await asyncio.sleep(0.01)
            answer = self.answers[partition]
            if answer is None:
                await asyncio.Event().wait()  # never answers
            if isinstance(answer, Exception):
                raise answer
            assert answer is not None
            return answer
        finally:
            self.at_once -= 1


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> list[Hub]:
    """The hub the next count reads (set its answers first); the clients it was read through."""
    opened: list[Hub] = []

    @contextlib.asynccontextmanager
    async def hub_client(address: Any) -> AsyncIterator[Hub]:
        assert address is ADDRESS
        yield opened[-1]

    monkeypatch.setattr(checkpointresets, "hub_client", hub_client)
    return opened


@pytest.mark.looptime
async def test_the_events_the_partition_holds_past_each_checkpoint_are_counted(
    hub: list[Hub],
) -> None:
    hub.append(
        Hub(
            {
                "0": properties(0, 1041),  # processed to 1000: 41 wait
                "1": properties(500, 999),  # retention removed 0-499: they wait for no one
                "2": properties(0, 99),  # processed to its end
                "3": properties(10, 9),  # empty, its events expired
            }
        )
    )
    listed = [checkpoint("0", 1000), checkpoint("1", 12), checkpoint("2", 99), checkpoint("3", 5)]
    waiting = await checkpointwaits._count(ADDRESS, listed)
    assert waiting == checkpointwaits.Waiting({"0": 41, "1": 500, "2": 0, "3": 0})
    assert checkpointwaits.warnings(waiting, listed) == []


@pytest.mark.looptime
async def test_at_most_eight_partitions_are_asked_at_once_over_one_client(
    hub: list[Hub],
) -> None:
    hub.append(Hub({str(p): properties(0, 99) for p in range(32)}))
    listed = [checkpoint(str(p), 49) for p in range(32)]
    waiting = await checkpointwaits._count(ADDRESS, listed)
    assert set(waiting.counts.values()) == {50}
    assert (len(hub), sorted(hub[0].asked, key=int)) == (1, [str(p) for p in range(32)])
    assert hub[0].most_at_once == checkpointwaits.PARALLEL_READS


@pytest.mark.looptime
async def test_a_partition_the_hub_cannot_say_is_named_and_the_others_counted(
    hub: list[Hub],
) -> None:
    hub.append(Hub({"0": properties(0, 9), "1": ConnectionError("link detached")}))
    listed = [checkpoint("0", 4), checkpoint("1", 4)]
    waiting = await checkpointwaits._count(ADDRESS, listed)
    assert waiting.counts == {"0": 5}
    assert checkpointwaits.warnings(waiting, listed) == [
        "ehb: warning: the events waiting after the checkpoints of partition 1 are not known: "
        "Event Hub 'orders' in shop.servicebus.windows.net: cannot read the properties of "
        "partition 1 (ConnectionError); check spec.eventHub and its credentials"
    ]


@pytest.mark.looptime
async def test_a_hub_that_never_answers_costs_the_listing_one_bound_in_all(
    hub: list[Hub],
) -> None:
    """Not a call's timeout per partition, which would be four rounds of 15 s for 32
    partitions read eight at a time."""
    hub.append(Hub({**{str(p): None for p in range(32)}, "0": properties(0, 9)}))
    listed = [checkpoint(str(p), 4) for p in range(32)]
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiting = await checkpointwaits._count(ADDRESS, listed)
    assert loop.time() - started == pytest.approx(checkpointwaits.READ_TIMEOUT_S)
    assert waiting.counts == {"0": 5}
    (said,) = checkpointwaits.warnings(waiting, listed)
    assert said.startswith(
        "ehb: warning: the events waiting after the checkpoints of partitions 1, "
    )
    assert said.endswith(
        "are not known: Event Hub 'orders' in shop.servicebus.windows.net said where 1 of 32 "
        "partitions end within 15 s"
    )


@pytest.mark.looptime
async def test_a_checkpoint_past_its_partitions_end_is_said_not_counted_as_nothing(
    hub: list[Hub],
) -> None:
    """The hub created again under its name starts at 0: a checkpoint at 1000 over a partition
    ending at 9 waits for an event the stream may never have. A count of 0 would read as
    caught up; the line says what happened and what the next owner does."""
    hub.append(Hub({"0": properties(0, 9), "1": properties(0, -1), "2": properties(0, 9)}))
    listed = [checkpoint("0", 1000), checkpoint("1", 5), checkpoint("2", 9)]
    waiting = await checkpointwaits._count(ADDRESS, listed)
    assert (waiting.counts, waiting.past_end) == ({"2": 0}, {"0": 9, "1": -1})
    assert checkpointwaits.warnings(waiting, listed) == [
        "ehb: warning: partition 0: checkpoint at sequence number 1000 is past the partition's "
        "last event (9): the Event Hub was created again under its name, or the blob was "
        "edited; the next owner to take it up starts it again from spec.startPosition (reset "
        "it now with `ehb checkpoints reset`)",
        "ehb: warning: partition 1: checkpoint at sequence number 5 is past the partition's "
        "end (it holds no event): the Event Hub was created again under its name, or the blob was "
        "edited; the next owner to take it up starts it again from spec.startPosition (reset "
        "it now with `ehb checkpoints reset`)",
    ]
    rows = checkpoints.rows(listed, now=NOW, waiting=waiting.counts)
    assert [r["waiting"] for r in rows] == [None, None, 0]


def test_the_table_has_the_column_only_where_the_hub_was_asked() -> None:
    listed = [checkpoint("0", 1000), checkpoint("1", 12)]
    with_counts = checkpoints.rows(listed, now=NOW, waiting={"0": 12345})
    assert [r["waiting"] for r in with_counts] == [12345, None]
    header, *lines = checkpoints.table(with_counts, waiting=True).splitlines()
    assert header.split()[-1] == "WAITING"
    assert [re.split(r"\s{2,}", line)[-1] for line in lines] == ["12,345", "-"]
    # Without NAME the hub is not read: no column, and null in JSON.
    plain = checkpoints.rows(listed, now=NOW)
    assert [r["waiting"] for r in plain] == [None, None]
    assert "WAITING" not in checkpoints.table(plain)


# -- through ``ehb checkpoints list NAME`` (`pausedconsumers`: the CR, its Secrets, its hub)


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> pausedconsumers.PausedConsumer:
    """``shop/orders`` with events 0-9 in partition 0 and 0-2 in 1, checkpointed at 4 and 2."""
    paused = pausedconsumers.install(monkeypatch)
    paused.hub.partitions["0"].count = 10
    paused.hub.partitions["1"].count = 3

    async def list_checkpoints(target: Any, *, owner_id: str) -> list[checkpointing.Checkpoint]:
        return [checkpoint("0", 4), checkpoint("1", 2)]

    monkeypatch.setattr(checkpoints, "list_checkpoints", list_checkpoints)
    return paused


def test_the_list_reads_the_hub_as_the_crs_secret_says(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = pausedconsumers.ehb(
        capsys, "checkpoints", "list", "orders", "-n", "shop", "--json"
    )
    assert (status, err) == (0, "")
    assert [(r["partition"], r["waiting"]) for r in json.loads(out)] == [("0", 5), ("1", 0)]
    assert [len(p.properties_reads) for p in consumer.hub.partitions.values()] == [1, 1]


def test_a_hub_whose_identity_the_admin_would_lend_is_not_read(
    consumer: pausedconsumers.PausedConsumer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CR naming workload identity without spec.serviceAccountName would have the admin's
    own identity read a hub the tenant chose: refused before any client or token exists, as
    for every admin command; the checkpoints are listed, the line says what to change."""
    spec = copy.deepcopy(dict(pausedconsumers.SPEC))
    spec["eventHub"]["credentials"] = {"workloadIdentity": {}}
    consumer.kube.add_consumer("shop", "orders", spec, status=pausedconsumers.PAUSED)
    clients: list[object] = []
    monkeypatch.setattr(receiving, "make_client", lambda address: clients.append(address))
    status, out, err = pausedconsumers.ehb(capsys, "checkpoints", "list", "orders", "-n", "shop")
    assert status == 0
    assert [line.split()[-1] for line in out.splitlines()] == ["WAITING", "-", "-"]
    (line,) = err.splitlines()
    assert line.startswith(
        "ehb: warning: the events waiting after the checkpoints of partitions 0, 1 are not "
        "known: spec.eventHub: EventHubConsumer shop/orders declares workload identity"
    )
    assert "--use-my-identity" in line
    assert clients == []


# -- what a reset skips or replays (`checkpointchanges`)


def test_a_reset_row_counts_the_events_waiting_before_and_after() -> None:
    """Read from the bounds the reset plan reads: a skip reads 41 -> 0; a checkpoint past the
    partition's end (the hub created again) has no before, not a 0 that reads as caught up."""
    bounds = startpositions.PartitionBounds(
        beginning_sequence_number=0, last_sequence_number=1041, last_offset="104100", empty=False
    )

    def change(partition: str, old: int | None, new: int) -> checkpointresets.Change:
        return checkpointresets.Change(
            partition=partition,
            old=None if old is None else checkpoint(partition, old),
            new=checkpointblobs.Position(offset="104100", sequence_number=new),
            epoch=4,
            limits=bounds,
        )

    changes = [change("0", 1000, 1041), change("1", 5000, 1041), change("2", None, -1)]
    rows = checkpointchanges.change_rows(changes)
    assert [(r["old"] and r["old"]["waiting"], r["new"]["waiting"]) for r in rows] == [
        (41, 0),
        (None, 0),
        (None, 1042),
    ]
    table = checkpointchanges.change_table(rows).splitlines()
    assert [re.split(r"\s{2,}", line)[-1] for line in table] == [
        "WAITING",
        "41 -> 0",
        "- -> 0",
        "- -> 1,042",
    ]
    # An import reads no bounds: no column, null in JSON.
    imported = checkpointchanges.change_rows([dataclasses.replace(c, limits=None) for c in changes])
    assert {r["new"]["waiting"] for r in imported} == {None}
    assert "WAITING" not in checkpointchanges.change_table(imported)


def test_the_table_names_the_owning_pod_and_json_keeps_its_uid() -> None:
    """An owner id is ``<pod>/<uid>``: the table showed both, 80 characters a line."""
    owned = dataclasses.replace(
        checkpoint("0", 7), owner_id="orders-69d9fc655b-5pfdq/9c773cd0-e2df-4040-ab45-09d3ecacb554"
    )
    rows = checkpoints.rows([owned, checkpoint("1", 3)], now=NOW)
    assert rows[0]["owner"] == "orders-69d9fc655b-5pfdq/9c773cd0-e2df-4040-ab45-09d3ecacb554"
    _, *lines = checkpoints.table(rows).splitlines()
    assert [re.split(r"\s{2,}", line)[3] for line in lines] == [
        "orders-69d9fc655b-5pfdq",
        "orders-0",
    ]
