"""The chaos run's parts without a stack: fault selection, dead-letter accounting, recovery,
the checkpoint watch across a location change, the misbehaving handler, poison marking."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointing
from eventhub_balancer_devstack import chaosfaults, chaoshandlers, chaoswatches, recording
from eventhub_balancer_devstack.scenarios import producing


def test_faults_default_to_all_and_keep_their_order() -> None:
    assert chaosfaults.parse_faults("all") == chaosfaults.FAULTS
    assert chaosfaults.parse_faults("") == chaosfaults.FAULTS
    assert chaosfaults.parse_faults("poison, kill") == ("kill", "poison")
    assert {"poison", "hang", "apipause", "midfence", "specchange"} <= set(chaosfaults.FAULTS)


def test_an_unknown_fault_names_the_known_ones() -> None:
    with pytest.raises(errors.InvalidInput, match=r"--faults.*unknown fault kind.*kil.*midfence"):
        chaosfaults.parse_faults("kil,poison")
    with pytest.raises(errors.InvalidInput, match="--faults"):
        chaosfaults.ChaosOptions(faults=())


def test_the_recovery_bound_is_one_cycle_plus_two_seconds() -> None:
    options = chaosfaults.ChaosOptions(interval_seconds=2, handoff_timeout_seconds=5)
    assert options.recovery_bound_s == 4.0


def test_each_poison_batch_ahead_adds_the_failure_policys_retries_to_the_bound() -> None:
    # Three tries with the pods' default backoff: waits of 0.5 s and 1.0 s between them.
    assert chaoswatches.MAX_ATTEMPTS == 3
    assert chaoswatches.poison_retries_s() == 1.5
    options = chaosfaults.ChaosOptions(interval_seconds=2)
    assert options.recovery_bound_with(0) == options.recovery_bound_s == 4.0
    # Seed 25's case: a spec change left partition 7 three poison batches to meet again,
    # 4.95 s of recovery against 4 s before the retries counted.
    assert options.recovery_bound_with(3) == 8.5


def test_the_poison_ahead_is_the_most_one_partition_has_left() -> None:
    # Poison sent per partition, less the batches dead-lettered in the current location.
    assert chaoswatches.poison_ahead({"7": 3, "1": 1}, {}) == 3
    assert chaoswatches.poison_ahead({"7": 3, "1": 2}, {"7": 3}) == 2
    # More dead-lettered than sent (a batch dead-lettered twice across a crash): none ahead.
    assert chaoswatches.poison_ahead({"7": 1}, {"7": 2}) == 0
    assert chaoswatches.poison_ahead({}, {"7": 2}) == 0


def test_an_api_pause_is_bounded_by_the_run() -> None:
    assert chaosfaults.ChaosOptions(duration_s=40).apipause_s == 20
    assert chaosfaults.ChaosOptions(duration_s=600).apipause_s == chaosfaults.APIPAUSE_MAX_S


def test_dead_letter_blobs_account_for_their_events() -> None:
    blob = json.dumps(
        {
            "error": "PoisonEvent: ...",
            "events": [
                {"partition": "3", "sequenceNumber": 7, "offset": "700", "body": "eA=="},
                {"partition": "3", "sequenceNumber": 8, "offset": "800", "body": "eA=="},
            ],
        }
    ).encode()
    dead = chaoswatches.parse_deadletter(blob)
    assert dead == [("3", 7), ("3", 8)]
    missing = [("3", 7), ("3", 8), ("3", 9), ("1", 7)]
    assert chaoswatches.account(missing, dead) == [("3", 9), ("1", 7)]


@pytest.mark.parametrize(
    "data",
    [b"not json", b"[]", b'{"events": 1}', b'{"events": [{"partition": "1"}]}', b'{"events": [3]}'],
)
def test_an_unreadable_dead_letter_blob_is_an_error(data: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - any ValueError: the run lists the blob
        chaoswatches.parse_deadletter(data)


def test_the_dead_letter_prefix_sits_next_to_the_checkpoints() -> None:
    prefix = chaoswatches.deadletter_prefix(hub="Chaos", consumer_group="$Default")
    assert prefix == "demo.servicebus.windows.net/chaos/$default/deadletter/"


def test_progress_needs_every_partition_past_its_target() -> None:
    targets = {"0": 10, "1": 5, "2": -1}
    assert not chaoswatches.progressing(targets, checkpoints={"0": 10}, processed={"1": 4})
    assert chaoswatches.progressing(targets, checkpoints={"0": 10}, processed={"1": 5})
    # A dead-lettered last event is never processed, but the checkpoint passes it.
    assert chaoswatches.progressing(targets, checkpoints={"0": 10, "1": 6}, processed={})


@dataclasses.dataclass
class _Site:
    container: str = "checkpoints"


def _cp(partition: str, sequence: int, epoch: int, owner: str) -> checkpointing.Checkpoint:
    return checkpointing.Checkpoint(
        partition=partition,
        offset=str(sequence * 100),
        sequence_number=sequence,
        epoch=epoch,
        owner_id=owner,
        etag="e",
        last_modified=None,
    )


def test_the_watch_checks_each_location_on_its_own() -> None:
    watch = chaoswatches.CheckpointWatch(site=_Site())  # type: ignore[arg-type]
    watch.check([_cp("0", 50, 2, "a")], container="checkpoints")
    watch.follow("checkpoints-b")
    # The new location starts from the start position: not a regression of the old one.
    watch.check([_cp("0", 3, 3, "b")], container="checkpoints-b")
    assert watch.regressions == []
    assert watch.conflicts == []
    assert watch.positions() == {"0": 3}
    watch.check([_cp("0", 2, 3, "b")], container="checkpoints-b")
    watch.check([_cp("0", 60, 3, "c")], container="checkpoints-b")
    assert watch.regressions == ["checkpoints-b: partition 0: sequence 3 -> 2"]
    assert watch.conflicts == ["checkpoints-b: partition 0: epoch 3 written by b and c"]


def test_one_shot_faults_and_api_faults_are_skipped_when_they_cannot_come() -> None:
    options = chaosfaults.ChaosOptions(faults=("kill", "operator", "apipause", "specchange"))
    runner = chaosfaults.Chaos(
        scenario=None,  # type: ignore[arg-type]
        system=None,  # type: ignore[arg-type]
        proxy=None,  # type: ignore[arg-type]
        watch=None,  # type: ignore[arg-type]
        options=options,
    )
    # The kinds not tried yet come first, the API pause last of them.
    assert runner.choices() == ["kill", "operator", "specchange"]
    runner._tried |= {"kill", "operator", "specchange"}
    runner.faults["specchange"] = 1
    assert runner.choices() == ["apipause"]
    runner._tried.add("apipause")
    runner.faults["apipause"] = 1
    assert runner.choices() == ["kill", "operator"]
    runner._resume_at = 1.0  # paused
    assert runner.choices() == ["kill"]


# -- the handler


@dataclasses.dataclass(frozen=True)
class _Event:
    sequence_number: int
    properties: dict[Any, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Context:
    pod: str = "p-1"
    partition: str = "2"
    epoch: int = 4


def test_poison_is_recognised_as_str_or_bytes() -> None:
    assert chaoshandlers.is_poison(_Event(1, {"chaos": "poison"}))
    assert chaoshandlers.is_poison(_Event(1, {b"chaos": b"poison"}))
    assert not chaoshandlers.is_poison(_Event(1, {b"chaos": b"fine"}))
    assert not chaoshandlers.is_poison(_Event(1))


def test_a_poison_batch_raises_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(recording.ENV_RECORD_DIR, str(tmp_path))
    batch = [_Event(5), _Event(6, {b"chaos": b"poison"})]
    with pytest.raises(chaoshandlers.PoisonEvent, match=r"partition 2.*\[6\]"):
        chaoshandlers.process(batch, _Context())
    assert recording.RecordReader(tmp_path).read_new() == []
    chaoshandlers.process([_Event(7)], _Context())
    (recorded,) = recording.RecordReader(tmp_path).read_new()
    assert list(recorded.sequence_numbers()) == [7]


def test_one_hang_ticket_hangs_one_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(recording.ENV_RECORD_DIR, str(tmp_path))
    monkeypatch.setenv(chaoshandlers.ENV_HANG_SECONDS, "7.5")
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    (tmp_path / f"{chaoshandlers.HANG_TICKET}1").touch()
    chaoshandlers.process([_Event(1)], _Context())
    chaoshandlers.process([_Event(2)], _Context())
    assert sleeps == [7.5]
    assert len(recording.RecordReader(tmp_path).read_new()) == 2


def test_a_taken_ticket_says_when_its_hang_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1000.0)
    (tmp_path / f"{chaoshandlers.HANG_TICKET}1").touch()
    (tmp_path / f"{chaoshandlers.HANG_TICKET}2").touch()
    assert chaoshandlers.claim_hang_ticket(tmp_path) == f"{chaoshandlers.HANG_TICKET}1"
    assert chaoshandlers.hangs_began(tmp_path) == [1000.0]
    # The faults are over: the ticket nobody took is called off, the taken one stays.
    assert chaoshandlers.cancel_hangs(tmp_path) == 1
    assert chaoshandlers.claim_hang_ticket(tmp_path) is None
    assert chaoshandlers.hangs_began(tmp_path) == [1000.0]


# -- poison marking


class _Data:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.properties: dict[str, str] | None = None


class _Batch(list[_Data]):
    def add(self, data: _Data) -> None:
        self.append(data)


class _Client:
    def __init__(self) -> None:
        self.sent: list[tuple[str, _Batch]] = []
        self._partition = ""

    async def create_batch(self, *, partition_id: str) -> _Batch:
        self._partition = partition_id
        return _Batch()

    async def send_batch(self, batch: _Batch) -> None:
        self.sent.append((self._partition, batch))


async def test_a_poisoned_send_marks_one_event() -> None:
    client = _Client()
    sent = await producing.Producer._send(client, "4", 3, _Data, b"x", poison=True)
    assert sent == 3
    ((partition, batch),) = client.sent
    assert partition == "4"
    assert [d.properties for d in batch] == [{"chaos": "poison"}, None, None]


def test_poison_requests_queue_per_partition() -> None:
    producer = producing.Producer(connection_string="", hub="h", rate=1, partitions=list)
    producer.poison("1")
    producer.poison("1")
    assert producer._poison_due == ["1", "1"]
