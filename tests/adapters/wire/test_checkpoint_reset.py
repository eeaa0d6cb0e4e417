"""``ehb checkpoints reset | export | import`` against Azurite, the emulator and the local API.

A reset must refuse while the consumer consumes, change nothing on a dry run, put each
partition where its target says, and write epochs above every owner's so that a stale pod
cannot move the checkpoint back. The pure part (what each target means, the file format) is
tested first, without any service.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from azure.core import exceptions as azure_errors
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer import cli, errors
from eventhub_balancer.adapters import (
    blobs,
    checkpointdocuments,
    checkpointing,
    checkpointrequests,
    checkpointresets,
    kubeapi,
    kubeclients,
    receiving,
)
from eventhub_balancer.contracts import checkpointblobs, startpositions
from eventhub_balancer_devstack import azurite as azurite_launcher
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.kube import LocalKubeAPI, apiservers
from tests.support.fixtures.azurite import unique_container_name
from tests.support.fixtures.consumer import send_events
from tests.support.fixtures.eventhubs import EventHubTarget

FQNS = "shop.servicebus.windows.net"
NAMESPACE = "shop"
NAME = "orders"
#: The stale owner of partition 0 before the reset, and the epochs it and the operator hold.
POD = "orders-pod-a"
BLOB_EPOCH = 3
#: The longest an ``ehb`` process may take (it takes a few seconds).
PROCESS_TIMEOUT = 120.0
STATUS_EPOCH = 7

BOUNDS = startpositions.PartitionBounds(
    beginning_sequence_number=10, last_sequence_number=19, last_offset="1900", empty=False
)
EMPTY = startpositions.PartitionBounds(
    beginning_sequence_number=0, last_sequence_number=-1, last_offset="-1", empty=True
)


# -- what each target means (pure)


@pytest.mark.parametrize(
    ("target", "old", "first_at", "expected"),
    [
        (checkpointresets.ToEarliest(), 15, None, 9),
        (checkpointresets.ToLatest(), 15, None, 19),
        (checkpointresets.ToSequence(sequence_number=13), 15, None, 12),
        (checkpointresets.ToSequence(sequence_number=0), 15, None, 9),  # before retention
        (checkpointresets.ToSequence(sequence_number=99), 15, None, 19),  # past the end
        (checkpointresets.ShiftBy(delta=-3), 15, None, 12),
        (checkpointresets.ShiftBy(delta=-30), 15, None, 9),
        (checkpointresets.ShiftBy(delta=3), None, None, 12),  # no blob: from the beginning
        (checkpointresets.ToDatetime(when=datetime.datetime.now(datetime.UTC)), 15, 14, 13),
        (checkpointresets.ToDatetime(when=datetime.datetime.now(datetime.UTC)), 15, None, 19),
    ],
)
def test_each_target_names_the_last_processed_event(
    target: checkpointresets.Target, old: int | None, first_at: int | None, expected: int
) -> None:
    position = checkpointresets.new_position(
        target,
        old=None if old is None else checkpointblobs.Position("x", old),
        limits=BOUNDS,
        first_at=first_at,
    )
    assert position.sequence_number == expected
    if expected == 9:
        assert position.offset == checkpointblobs.OFFSET_BEFORE_FIRST
    elif expected == 19:
        assert position.offset == "1900"
    else:
        assert position.offset == checkpointblobs.OFFSET_UNKNOWN


def test_an_empty_partition_resets_to_its_end() -> None:
    for target in (checkpointresets.ToEarliest(), checkpointresets.ShiftBy(delta=-5)):
        position = checkpointresets.new_position(target, old=None, limits=EMPTY)
        assert position == checkpointblobs.Position(offset="-1", sequence_number=-1)


def test_the_epoch_is_above_the_blob_and_the_status() -> None:
    assert checkpointresets.next_epoch("0", stored=3, status_epochs={"0": 7}) == 8
    assert checkpointresets.next_epoch("0", stored=9, status_epochs={"0": 7}) == 10
    assert checkpointresets.next_epoch("1", stored=0, status_epochs={"1": "junk"}) == 1
    with pytest.raises(errors.ConfigurationError, match="no room"):
        checkpointresets.next_epoch("0", stored=2**63 - 2, status_epochs={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400)],
)
def test_durations(text: str, expected: int) -> None:
    assert checkpointresets.parse_duration(text).total_seconds() == expected


@pytest.mark.parametrize("text", ["", "15", "m", "15x", "-5m", "1m1h"])
def test_bad_durations_say_what_to_write(text: str) -> None:
    with pytest.raises(errors.InvalidInput, match=r"--by-duration.*e\.g\. 90s, 15m"):
        checkpointresets.parse_duration(text)


def test_datetimes_need_a_zone() -> None:
    with pytest.raises(errors.InvalidInput, match="no time zone"):
        checkpointresets.parse_datetime("2024-05-01T00:00:00")
    with pytest.raises(errors.InvalidInput, match="RFC 3339"):
        checkpointresets.parse_datetime("yesterday")
    when = checkpointresets.parse_datetime("2024-05-01T00:00:00Z")
    assert when == datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)


def _document(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "kind": "EventHubCheckpoints",
        "version": 1,
        "checkpoints": [{"partition": "0", "sequenceNumber": 4, "offset": "400"}],
    }
    return {**base, **changes}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "must be a JSON object"),
        (_document(kind="Other"), "kind: must be 'EventHubCheckpoints'"),
        (_document(version=2), "version: must be 1"),
        (_document(checkpoints={}), "checkpoints: must be a list"),
        (_document(checkpoints=[]), "is empty"),
        (_document(checkpoints=[{"partition": "0"}]), r"checkpoints\[0\].sequenceNumber"),
        (
            _document(checkpoints=[{"partition": "0", "sequenceNumber": True}]),
            r"checkpoints\[0\].sequenceNumber",
        ),
        (
            _document(checkpoints=[{"partition": "a b", "sequenceNumber": 1}]),
            r"checkpoints\[0\].partition",
        ),
        (
            _document(
                checkpoints=[
                    {"partition": "0", "sequenceNumber": 1},
                    {"partition": "0", "sequenceNumber": 2},
                ]
            ),
            "appears twice",
        ),
        (
            _document(checkpoints=[{"partition": "0", "sequenceNumber": 1, "offset": 5}]),
            r"checkpoints\[0\].offset",
        ),
    ],
)
def test_import_files_are_validated(document: object, problem: str) -> None:
    with pytest.raises(errors.InvalidInput, match=problem):
        checkpointdocuments.parse_import(document, source="backup.json")


async def test_a_malformed_connection_string_names_the_secret() -> None:
    address = receiving.EventHubAddress(FQNS, "hub", connection_string="not=a;connection")
    with pytest.raises(errors.ConfigurationError, match=r"spec\.eventHub\.credentials") as e:
        async with checkpointresets.hub_client(address):
            pass
    assert "write Endpoint=sb://<namespace>.servicebus.windows.net/;" in str(e.value)
    assert "not=a" not in str(e.value)  # never the string itself


# -- the writes, on Azurite alone


def _blobs(container: Any) -> Any:
    return checkpointresets.store_blobs(
        container, fully_qualified_namespace=FQNS, eventhub_name="hub", consumer_group="$Default"
    )


def _owner(container: Any, owner: str = POD, *, hub: str = "hub") -> checkpointing.CheckpointStore:
    return checkpointing.CheckpointStore(
        container,
        fully_qualified_namespace=FQNS,
        eventhub_name=hub,
        consumer_group="$Default",
        owner_id=owner,
    )


async def test_a_write_goes_above_an_epoch_fenced_after_the_plan(blob_container: Any) -> None:
    pod = _owner(blob_container)
    await pod.fence("0", BLOB_EPOCH)
    old = await pod.read("0")
    change = checkpointresets.Change(
        partition="0", old=old, new=checkpointblobs.Position("-1", -1), epoch=BLOB_EPOCH + 1
    )
    await _owner(blob_container, "late-pod").fence("0", 10)  # between the plan and the write
    async with asyncio.timeout(10):
        done = await checkpointresets.write(_blobs(blob_container), change, status_epochs={})
    assert done.epoch == 11
    stored = await pod.read("0")
    assert stored is not None
    assert (stored.epoch, stored.sequence_number, stored.owner_id) == (
        11,
        -1,
        checkpointresets.RESET_OWNER,
    )


async def test_a_write_breaks_a_dead_fencers_lease(blob_container: Any) -> None:
    pod = _owner(blob_container)
    await pod.fence("0", BLOB_EPOCH)
    await pod.update("0", offset="700", sequence_number=7)
    await blob_container.get_blob_client(pod.blob_name("0")).acquire_lease(lease_duration=60)
    change = checkpointresets.Change(
        partition="0", old=None, new=checkpointblobs.Position("", 2), epoch=1
    )
    async with asyncio.timeout(10):  # far shorter than the lease: it was broken, not waited out
        done = await checkpointresets.write(_blobs(blob_container), change, status_epochs={})
    assert done.written is not None
    assert (done.epoch, done.written.sequence_number) == (BLOB_EPOCH + 1, 2)


async def test_a_shift_moves_the_position_it_finds_not_the_one_planned(
    blob_container: Any,
) -> None:
    """Two admins shift the same paused partition by -2 at once: each write lands on the
    blob as it finds it, so 4 events are replayed, and each says what it moved from."""
    pod = _owner(blob_container)
    await pod.fence("0", BLOB_EPOCH)
    await pod.update("0", offset="1700", sequence_number=17)
    planned = await pod.read("0")
    limits = BOUNDS  # 10..19 retained
    shift = checkpointresets.ShiftBy(delta=-2)
    change = checkpointresets.Change(
        partition="0",
        old=planned,
        new=checkpointresets.new_position(
            shift, old=planned.position if planned else None, limits=limits
        ),
        epoch=BLOB_EPOCH + 1,
        shift=shift,
        limits=limits,
    )
    assert change.new.sequence_number == 15
    async with asyncio.timeout(10):
        first = await checkpointresets.write(_blobs(blob_container), change, status_epochs={})
        second = await checkpointresets.write(_blobs(blob_container), change, status_epochs={})
    assert first.written is not None
    assert second.written is not None
    assert first.old is not None
    assert second.old is not None
    assert (first.old.sequence_number, first.new.sequence_number) == (17, 15)
    assert (second.old.sequence_number, second.new.sequence_number) == (15, 13)
    stored = await pod.read("0")
    assert stored is not None
    assert (stored.sequence_number, stored.epoch) == (13, BLOB_EPOCH + 2)


class _LosesFirstAnswer:
    """A container whose first write of each kind (``method``) lands on Azurite but whose
    answer is lost on the way back, as when a connection drops after the request."""

    def __init__(self, container: Any, method: str) -> None:
        self.container = container
        self.method = method
        self.lost = 0

    def get_blob_client(self, name: str) -> Any:
        blob = self.container.get_blob_client(name)
        outer = self

        class Blob:
            def __getattr__(self, attribute: str) -> Any:
                return getattr(blob, attribute)

        async def lose_answer(*args: Any, **kwargs: Any) -> Any:
            answer = await getattr(blob, outer.method)(*args, **kwargs)
            if outer.lost == 0:
                outer.lost += 1
                raise azure_errors.ServiceResponseError("Connection reset by peer")
            return answer

        wrapped = Blob()
        setattr(wrapped, self.method, lose_answer)
        return wrapped


@pytest.mark.parametrize(
    ("method", "before", "after"),
    [("set_blob_metadata", 17, 15), ("upload_blob", None, 12)],
)
async def test_a_shift_whose_answer_was_lost_moves_the_checkpoint_once(
    blob_container: Any, method: str, before: int | None, after: int
) -> None:
    """One ``--shift-by`` whose write landed but got no answer: the retry finds the blob
    changed, and must recognise its own write rather than shift again from it."""
    pod = _owner(blob_container)
    if before is not None:
        await pod.fence("0", BLOB_EPOCH)
        await pod.update("0", offset="1700", sequence_number=before)
    planned = await pod.read("0")
    shift = checkpointresets.ShiftBy(delta=-2 if before is not None else 3)
    change = checkpointresets.Change(
        partition="0",
        old=planned,
        new=checkpointresets.new_position(
            shift, old=planned.position if planned else None, limits=BOUNDS
        ),
        epoch=BLOB_EPOCH + 1,
        shift=shift,
        limits=BOUNDS,
    )
    losing = _LosesFirstAnswer(blob_container, method)
    async with asyncio.timeout(10):
        done = await checkpointresets.write(_blobs(losing), change, status_epochs={})
    assert losing.lost == 1
    stored = await pod.read("0")
    assert stored is not None
    assert stored.sequence_number == after
    assert done.new.sequence_number == after
    assert (done.old.sequence_number if done.old else None) == before
    assert done.written is not None
    assert done.written.sequence_number == after


async def test_an_absolute_target_reports_the_blob_it_replaced(blob_container: Any) -> None:
    pod = _owner(blob_container)
    await pod.fence("0", BLOB_EPOCH)
    await pod.update("0", offset="1700", sequence_number=17)
    planned = await pod.read("0")
    change = checkpointresets.Change(
        partition="0", old=planned, new=checkpointblobs.Position("", 12), epoch=BLOB_EPOCH + 1
    )
    await pod.update("0", offset="1800", sequence_number=18)  # between the plan and the write
    async with asyncio.timeout(10):
        done = await checkpointresets.write(_blobs(blob_container), change, status_epochs={})
    assert done.old is not None
    assert done.written is not None
    assert (done.old.sequence_number, done.written.sequence_number) == (18, 12)


# -- against the services


@pytest.fixture
def local_kube(tmp_path: Path) -> Iterator[LocalKubeAPI]:
    """The local API with the repository's CRD, ``spec.paused`` included (the API server
    prunes fields its schema lacks)."""
    assert apiservers.REPOSITORY_CRDS is not None
    crds = tmp_path / "crds"
    shutil.copytree(apiservers.REPOSITORY_CRDS, crds)
    path = crds / "eventhubconsumers.yaml"
    crd = yaml.safe_load(path.read_text())
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        spec.setdefault("paused", {"type": "boolean", "description": "pause consumption"})
    path.write_text(yaml.safe_dump(crd))
    with LocalKubeAPI(crds_dir=crds) as api:
        yield api


@dataclasses.dataclass
class Setup:
    kube: LocalKubeAPI
    kubeconfig: Path
    hub: EventHubTarget
    blob_connection_string: str
    container: str
    #: between the two sends to each partition: events 0-4 before, 5-9 after (partition 0)
    middle: datetime.datetime

    async def checkpoints(self) -> dict[str, checkpointing.Checkpoint]:
        async with blobs.open_container(
            container_name=self.container, connection_string=self.blob_connection_string
        ) as container:
            store = _owner(container, "reader", hub=self.hub.name)
            return {c.partition: c for c in await store.list()}

    def read(self) -> dict[str, checkpointing.Checkpoint]:
        return asyncio.run(self.checkpoints())

    def pause(self, *, condition: str | None = "True") -> None:
        self.kube.patch_object(clusters.CR, NAME, {"spec": {"paused": True}}, namespace=NAMESPACE)
        if condition is not None:
            stamp = clusters.stamp()
            self.kube.patch_object(
                clusters.CR,
                NAME,
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "Paused",
                                "status": condition,
                                "reason": "Paused" if condition == "True" else "Releasing",
                                "message": "every partition released",
                                "lastTransitionTime": stamp,
                            }
                        ]
                    }
                },
                namespace=NAMESPACE,
                subresource="status",
            )

    def reasons(self) -> list[str]:
        return [
            e.get("reason", "") for e in self.kube.list_objects("v1/events", namespace=NAMESPACE)
        ]

    def ehb_process(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python -m eventhub_balancer ARGS... -n shop --kubeconfig ...`` as a process."""
        where = ["-n", NAMESPACE, "--kubeconfig", str(self.kubeconfig)]
        return subprocess.run(
            [sys.executable, "-m", "eventhub_balancer", *args, *where],
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT,
            check=False,
        )

    def ehb(self, command: str, *args: str) -> int:
        """``ehb checkpoints COMMAND orders ARGS...`` against the local API."""
        return cli.main(
            [
                "checkpoints",
                command,
                NAME,
                *args,
                "-n",
                NAMESPACE,
                "--kubeconfig",
                str(self.kubeconfig),
            ]
        )


async def _prepare(connection_string: str, container_name: str, hub: str) -> None:
    """Partition 0 processed up to 5 by the stale owner, fenced with `BLOB_EPOCH`."""
    async with blobs.open_container(
        container_name=container_name, connection_string=connection_string
    ) as container:
        await blobs.ensure_container(container)
        store = checkpointing.CheckpointStore(
            container,
            fully_qualified_namespace=FQNS,
            eventhub_name=hub,
            consumer_group="$Default",
            owner_id=POD,
        )
        await store.fence("0", BLOB_EPOCH)
        await store.update("0", offset="500", sequence_number=5)


@pytest.fixture
def setup(
    local_kube: LocalKubeAPI,
    kubeconfig: Path,
    eventhubs_hub: EventHubTarget,
    azurite: azurite_launcher.Azurite,
) -> Setup:
    container = unique_container_name("r")
    connection = eventhubs_hub.namespace_connection_string
    asyncio.run(send_events(connection, eventhubs_hub.name, {"0": 5}))
    # Enqueued times have millisecond resolution: keep clear of both sends.
    time.sleep(0.05)
    middle = datetime.datetime.now(datetime.UTC)
    time.sleep(0.05)
    asyncio.run(send_events(connection, eventhubs_hub.name, {"0": 5, "1": 4}))
    asyncio.run(_prepare(azurite.connection_string, container, eventhubs_hub.name))
    cluster = clusters.LocalCluster(local_kube)
    cluster.secret(NAMESPACE, name="eh", key="cs", value=connection)
    cluster.secret(NAMESPACE, name="blob", key="cs", value=azurite.connection_string)
    local_kube.create_object(
        clusters.CR,
        {
            "apiVersion": "eventhub-balancer.dev/v1alpha1",
            "kind": "EventHubConsumer",
            "metadata": {"name": NAME},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": FQNS,
                    "name": eventhubs_hub.name,
                    "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
                },
                "checkpointStore": {
                    "containerName": container,
                    "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
                },
                "selector": {"matchLabels": {"app": "orders"}},
            },
        },
        namespace=NAMESPACE,
    )
    local_kube.patch_object(
        clusters.CR,
        NAME,
        {"status": {"epochs": {"0": STATUS_EPOCH}}},
        namespace=NAMESPACE,
        subresource="status",
    )
    return Setup(
        kube=local_kube,
        kubeconfig=kubeconfig,
        hub=eventhubs_hub,
        blob_connection_string=azurite.connection_string,
        container=container,
        middle=middle,
    )


def test_a_reset_refuses_unless_paused_and_a_dry_run_writes_nothing(
    setup: Setup, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = setup.read()
    assert setup.ehb("reset", "--to-earliest") == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "is not paused" in err
    assert """kubectl patch eventhubconsumer orders -n shop --type merge""" in err
    assert """'{"spec":{"paused":true}}'""" in err

    setup.pause(condition="False")  # asked to pause, partitions not yet released
    assert setup.ehb("reset", "--to-earliest") == cli.EXIT_USAGE
    assert "has not yet released every partition" in capsys.readouterr().err

    backup = tmp_path / "backup.json"
    backup.write_text(json.dumps(_document()))
    assert setup.ehb("import", str(backup)) == cli.EXIT_USAGE
    assert "has not yet released every partition" in capsys.readouterr().err
    assert setup.read() == before
    assert "CheckpointsReset" not in setup.reasons()

    setup.pause()
    assert setup.ehb("reset", "--to-earliest", "--partitions", "0,1", "--dry-run") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{NAMESPACE}/{NAME} --to-earliest (dry run: nothing written)"
    assert lines[1].split() == ["PARTITION", "OLD", "NEW", "EPOCH", "WAITING"]
    # The events waiting before -> after: partition 0 (0-9, processed to 5) replays 6 events,
    # partition 1 (0-3, no checkpoint: its start position would say) all of its 4.
    epochs = ["3", "->", str(STATUS_EPOCH + 1)]
    assert lines[2].split() == ["0", "5", "->", "-1", *epochs, "4", "->", "10"]
    assert lines[3].split() == ["1", "-", "->", "-1", "-", "->", "1", "-", "->", "4"]
    assert len(lines) == 4
    assert setup.read() == before
    assert "CheckpointsReset" not in setup.reasons()


def test_a_reset_says_how_many_events_it_skips_and_an_import_leaves_it_unsaid(
    setup: Setup, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Partition 0 holds events 0-9, processed to 5: to the latest skips its 4 waiting. A reset
    reads each partition's bounds anyway; an import does not, and says nothing of them."""
    setup.pause()
    assert setup.ehb("reset", "--to-latest", "--partitions", "0", "--dry-run", "--json") == 0
    (row,) = json.loads(capsys.readouterr().out)["partitions"]
    assert (row["old"]["waiting"], row["new"]["waiting"]) == (4, 0)

    backup = tmp_path / "backup.json"
    position = {"partition": "0", "sequenceNumber": 2, "offset": "200"}
    backup.write_text(json.dumps(_document(checkpoints=[position])))
    assert setup.ehb("import", str(backup), "--dry-run") == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert header.split() == ["PARTITION", "OLD", "NEW", "EPOCH"]


def _reset_json(setup: Setup, capsys: pytest.CaptureFixture[str], *target: str) -> dict[str, int]:
    assert setup.ehb("reset", *target, "--partitions", "0,1", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["dryRun"] is False
    return {p["partition"]: p["new"]["sequenceNumber"] for p in document["partitions"]}


def test_the_epoch_fences_stale_owners_and_each_target_puts_partitions_where_it_says(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    """Partition 0 holds events 0-9 (5-9 after ``middle``), partition 1 holds 0-3 (all after).

    The first reset also shows the epochs: above every owner's, fencing out the stale owner,
    and kept (with the position) by the next owner's fence.
    """
    setup.pause()
    before = setup.read()  # what the stale owner of partition 0 holds in memory
    assert setup.ehb("reset", "--to-earliest", "--partitions", "0,1") == 0
    capsys.readouterr()
    stored = setup.read()
    assert stored["0"].epoch == STATUS_EPOCH + 1  # above the status's 7 and the blob's 3
    assert stored["1"].epoch == 1
    assert stored["0"].owner_id == checkpointresets.RESET_OWNER
    (event,) = [
        e
        for e in setup.kube.list_objects("v1/events", namespace=NAMESPACE)
        if e.get("reason") == "CheckpointsReset"
    ]
    assert event["involvedObject"]["name"] == NAME
    assert event["message"].startswith("Reset checkpoints (--to-earliest): 2 partition(s)")
    assert "0: 5 -> -1, 1: - -> -1" in event["message"]

    async def stale_then_next_owner() -> tuple[errors.OwnershipLost, checkpointing.Checkpoint]:
        async with blobs.open_container(
            container_name=setup.container, connection_string=setup.blob_connection_string
        ) as container:

            def store(owner: str) -> checkpointing.CheckpointStore:
                return checkpointing.CheckpointStore(
                    container,
                    fully_qualified_namespace=FQNS,
                    eventhub_name=setup.hub.name,
                    consumer_group="$Default",
                    owner_id=owner,
                )

            stale = store(POD)
            stale._owned["0"] = before["0"]  # its last write, from before the reset
            with pytest.raises(errors.OwnershipLost) as lost:
                await stale.update("0", offset="900", sequence_number=9)
            taken = await store("orders-pod-b").fence("0", STATUS_EPOCH + 2)
            return lost.value, taken

    lost, taken = asyncio.run(stale_then_next_owner())
    assert before["0"].epoch == BLOB_EPOCH
    assert str(STATUS_EPOCH + 1) in str(lost)
    assert taken.sequence_number == -1  # the next owner resumes where the reset put it
    assert setup.read()["0"].sequence_number == -1

    # Once as a process: the table goes nowhere, stdout is exactly one JSON document.
    done = setup.ehb_process(
        "checkpoints", "reset", NAME, "--to-latest", "--partitions", "0,1", "--json"
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    latest = {p["partition"]: p["new"]["sequenceNumber"] for p in document["partitions"]}
    assert latest == {"0": 9, "1": 3}
    assert _reset_json(setup, capsys, "--to-earliest") == {"0": -1, "1": -1}
    assert _reset_json(setup, capsys, "--to-sequence", "3") == {"0": 2, "1": 2}
    assert _reset_json(setup, capsys, "--shift-by", "4") == {"0": 6, "1": 3}
    assert _reset_json(setup, capsys, "--shift-by", "-2") == {"0": 4, "1": 1}
    assert _reset_json(setup, capsys, "--to-datetime", setup.middle.isoformat()) == {
        "0": 4,
        "1": -1,
    }
    assert _reset_json(setup, capsys, "--by-duration", "1h") == {"0": -1, "1": -1}
    stored = setup.read()
    assert {p: stored[p].sequence_number for p in ("0", "1")} == {"0": -1, "1": -1}
    assert "2" not in stored  # --partitions narrowed it

    assert setup.ehb("reset", "--to-latest", "--partitions", "0,7") == 2
    assert "--partitions: 7 not among the hub's partitions" in capsys.readouterr().err


def test_export_then_import_round_trips(
    setup: Setup, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert setup.ehb("export") == 0  # reading needs no pause
    exported = json.loads(capsys.readouterr().out)
    assert exported["kind"] == "EventHubCheckpoints"
    assert [(c["partition"], c["sequenceNumber"]) for c in exported["checkpoints"]] == [("0", 5)]
    backup = tmp_path / "backup.json"
    backup.write_text(json.dumps(exported))

    setup.pause()
    assert setup.ehb("reset", "--to-latest", "--partitions", "0") == 0
    capsys.readouterr()
    assert setup.read()["0"].sequence_number == 9

    done = setup.ehb_process("checkpoints", "import", NAME, str(backup), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # exactly one JSON document on stdout
    (row,) = document["partitions"]
    assert (row["old"]["sequenceNumber"], row["new"]["sequenceNumber"]) == (9, 5)
    stored = setup.read()["0"]
    assert (stored.sequence_number, stored.offset) == (5, "500")
    assert stored.epoch == STATUS_EPOCH + 2  # above the reset's own
    assert "CheckpointsImported" in setup.reasons()

    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({**exported, "checkpoints": [{"partition": "9", "sequenceNumber": 1}]})
    )
    assert setup.ehb("import", str(bad)) == 2
    assert "partition(s) 9 are not in Event Hub" in capsys.readouterr().err


def test_list_counts_the_events_waiting_after_each_checkpoint(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    """Partition 0 holds events 0-9 and its owner processed up to 5: 4 wait. Read from the hub
    with the CR's identity; the pods' metrics say it only for a partition a pod holds."""
    assert setup.ehb("list") == 0  # reading needs no pause
    listed = capsys.readouterr()
    assert listed.err == ""
    header, row = listed.out.splitlines()
    # The columns of every listing (tests/adapters/wire/test_checkpoints_cli.py), then this.
    assert header.split()[-2:] == ["DEATHS", "WAITING"]
    assert row.split()[:2] + row.split()[-1:] == ["0", "5", "4"]

    done = setup.ehb_process("checkpoints", "list", NAME, "--json")
    assert done.returncode == 0, done.stderr
    (document,) = json.loads(done.stdout)  # exactly one JSON document on stdout
    assert (document["sequenceNumber"], document["waiting"]) == (5, 4)


async def _past_the_end(setup: Setup) -> None:
    """Partition 1 (events 0-3) checkpointed at 1000, as a hub created again leaves it."""
    async with blobs.open_container(
        container_name=setup.container, connection_string=setup.blob_connection_string
    ) as container:
        store = _owner(container, hub=setup.hub.name)
        await store.fence("1", BLOB_EPOCH)
        await store.update("1", offset="100000", sequence_number=1000)


def test_list_names_a_checkpoint_past_its_partitions_end_instead_of_counting_it(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_past_the_end(setup))
    assert setup.ehb("list", "--json") == 0
    listed = capsys.readouterr()
    counts = {r["partition"]: (r["sequenceNumber"], r["waiting"]) for r in json.loads(listed.out)}
    assert counts == {"0": (5, 4), "1": (1000, None)}
    assert listed.err.splitlines() == [
        "ehb: warning: partition 1: checkpoint at sequence number 1000 is past the partition's "
        "last event (3): the Event Hub was created again under its name, or the blob was "
        "edited; the next owner to take it up starts it again from spec.startPosition (reset "
        "it now with `ehb checkpoints reset`)"
    ]


def test_list_without_its_hubs_secret_lists_the_checkpoints_and_says_why_not_the_waiting(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hub's side is a bonus: the blobs are listed, the count is left out, and one line
    says why and what to change."""
    setup.kube.patch_object(
        clusters.CR,
        NAME,
        {"spec": {"eventHub": {"credentials": {"connectionStringSecretRef": {"name": "gone"}}}}},
        namespace=NAMESPACE,
    )
    assert setup.ehb("list", "--json") == 0
    listed = capsys.readouterr()
    (document,) = json.loads(listed.out)
    assert (document["sequenceNumber"], document["waiting"]) == (5, None)
    (line,) = listed.err.splitlines()
    assert line.startswith(
        "ehb: warning: the events waiting after the checkpoints of partition 0 are not known: "
        "Secret shop/gone not found"
    )


def test_list_without_name_counts_with_the_hub_the_runner_names(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    """A consumer group no EventHubConsumer manages: the blobs and the hub named by flags.
    Without a way to the hub the listing has no column, as before."""
    where = ["checkpoints", "list", "--container", setup.container, "--eventhub-namespace"]
    where += [FQNS, "--hub", setup.hub.name, "--connection-string", setup.blob_connection_string]
    assert cli.main([*where, "--eventhub-connection-string", setup.hub.connection_string]) == 0
    listed = capsys.readouterr()
    assert listed.err == ""
    header, row = listed.out.splitlines()
    assert header.split()[-1] == "WAITING"
    assert row.split()[:2] + row.split()[-1:] == ["0", "5", "4"]

    assert cli.main([*where, "--json"]) == 0
    (document,) = json.loads(capsys.readouterr().out)
    assert (document["sequenceNumber"], document["waiting"]) == (5, None)
    assert cli.main(where) == 0
    assert "WAITING" not in capsys.readouterr().out


def test_an_export_after_a_shift_imports_again(
    setup: Setup, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A ``--shift-by`` writes no offset (the blob's is empty): the export of it, which the
    storage SDK lists as ``null``, must be a file the import takes back. It said
    ``checkpoints[0].offset: None is not an offset``, so the backup could not be restored."""
    setup.pause()
    assert setup.ehb("reset", "--shift-by", "-2", "--partitions", "0") == 0
    capsys.readouterr()
    done = setup.ehb_process("checkpoints", "export", NAME)
    assert done.returncode == 0, done.stderr
    exported = json.loads(done.stdout)
    assert [(c["sequenceNumber"], c["offset"]) for c in exported["checkpoints"]] == [(3, "")]
    backup = tmp_path / "backup.json"
    backup.write_text(done.stdout)

    assert setup.ehb("reset", "--to-latest", "--partitions", "0") == 0
    assert setup.ehb("import", str(backup)) == 0, capsys.readouterr().err
    assert setup.read()["0"].sequence_number == 3


def test_a_reset_that_fails_before_any_write_may_be_run_again(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store gives up on the first partition: nothing was written, so the same command may
    be run again, and the exit code says so (`cli.EXIT_UNAVAILABLE`). A reset cut short after
    a write exits 1 (below): the same ``--shift-by`` again would move the written ones twice."""
    setup.pause()

    async def refused(self: Any, partition: str, *args: Any, **kwargs: Any) -> Any:
        raise errors.CheckpointStoreUnreachable(
            f"checkpoint create of partition {partition}: gave up after 3 attempt(s) over 20.0 s"
        )

    for method in ("create", "write"):
        monkeypatch.setattr(checkpointrequests.CheckpointBlobs, method, refused)
    assert setup.ehb("reset", "--shift-by", "-2", "--partitions", "0,1") == cli.EXIT_UNAVAILABLE
    (line,) = capsys.readouterr().err.splitlines()
    assert "no partition was reset" in line
    assert setup.read()["0"].sequence_number == 5


def test_a_reset_that_fails_part_way_says_what_it_wrote_and_how_to_finish(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partition 0 is written, then the store gives up on partition 1: the one error line
    names what was reset and the ``--partitions`` that finishes the reset, and the Event on
    the CR records partition 0. Running the whole ``--shift-by`` again would move partition
    0 a second time; the line's command does not."""
    setup.pause()
    create = checkpointrequests.CheckpointBlobs.create

    async def refused(self: Any, partition: str, *args: Any, **kwargs: Any) -> Any:
        if partition == "1":
            raise errors.CheckpointStoreUnreachable(
                "checkpoint create of partition 1: gave up after 3 attempt(s) over 20.0 s"
            )
        return await create(self, partition, *args, **kwargs)

    monkeypatch.setattr(checkpointrequests.CheckpointBlobs, "create", refused)
    assert setup.ehb("reset", "--shift-by", "-2", "--partitions", "0,1") == 1
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("ehb: error: checkpoint create of partition 1: gave up")
    assert "partition 0 was reset (5 -> 3)" in line
    assert "partition 1 was not" in line
    # The command it names is the one given, for partition 1 alone: --kubeconfig kept (it
    # was dropped until 3 December, so the line reset the kubeconfig context's cluster).
    finish = shlex.split(line.split("run `", 1)[1].split("`", 1)[0])
    assert finish == [
        *("ehb", "checkpoints", "reset", "orders", "-n", "shop"),
        *("--kubeconfig", str(setup.kubeconfig), "--shift-by", "-2", "--partitions", "1"),
    ]
    stored = setup.read()
    assert stored["0"].sequence_number == 3
    assert "1" not in stored
    (event,) = [
        e
        for e in setup.kube.list_objects("v1/events", namespace=NAMESPACE)
        if e.get("reason") == "CheckpointsReset"
    ]
    assert event["message"].startswith("Reset checkpoints (--shift-by -2): 1 partition(s)")
    assert "0: 5 -> 3" in event["message"]

    monkeypatch.setattr(checkpointrequests.CheckpointBlobs, "create", create)
    assert cli.main(finish[1:]) == 0
    stored = setup.read()
    assert {p: stored[p].sequence_number for p in ("0", "1")} == {"0": 3, "1": -1}


def test_a_reset_stopped_by_ctrl_c_says_what_it_wrote(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while partition 1 is being written: exit 130, the one stderr line says
    partition 0 was reset and how to finish, and the Event on the CR records partition 0, as
    after a store that gives up (it recorded nothing after a Ctrl-C)."""
    setup.pause()
    create = checkpointrequests.CheckpointBlobs.create

    async def interrupted(self: Any, partition: str, *args: Any, **kwargs: Any) -> Any:
        if partition == "1":
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C: asyncio.run cancels the command
            await asyncio.sleep(30)
        return await create(self, partition, *args, **kwargs)

    monkeypatch.setattr(checkpointrequests.CheckpointBlobs, "create", interrupted)
    assert setup.ehb("reset", "--to-earliest", "--partitions", "0,1") == 130
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ehb: error: interrupted: partition 0 was reset (5 -> -1)")
    assert "ehb checkpoints reset orders -n shop --kubeconfig " in line
    assert " --to-earliest --partitions 1`" in line
    assert setup.read()["0"].sequence_number == -1
    (event,) = [
        e
        for e in setup.kube.list_objects("v1/events", namespace=NAMESPACE)
        if e.get("reason") == "CheckpointsReset"
    ]
    assert event["message"].startswith("Reset checkpoints (--to-earliest): 1 partition(s)")
    assert "0: 5 -> -1" in event["message"]


def test_a_reset_whose_event_is_refused_asks_for_the_users_right(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoints are written, the Event is refused by RBAC: the warning asks for
    ``create`` on events for the admin, and no longer also tells them to grant the operator's
    ServiceAccount access, which changes nothing for a reset."""
    setup.pause()

    async def forbidden(self: Any, *, namespace: str, body: Any) -> None:
        refusal = kube_exceptions.ApiException(status=403, reason="Forbidden")
        refusal.body = json.dumps({"message": 'events is forbidden: User "alice" cannot create'})
        raise kubeclients._wrap(refusal, f"create Event in {namespace}")

    monkeypatch.setattr(kubeapi.KubeAPI, "create_event", forbidden)
    assert setup.ehb("reset", "--to-earliest", "--partitions", "0") == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "ehb: warning: checkpoints written, but the Event on the CR was not (create Event in "
        'shop: forbidden (events is forbidden: User "alice" cannot create)); grant `create` on '
        "events to record resets"
    )
    assert setup.read()["0"].sequence_number == -1


def test_a_reset_stopped_while_its_event_is_posted_says_every_partition_was_written(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the last write, while the Event goes out: exit 130 with one line that says
    the reset is done. It exited 130 without a word, so the admin could not tell a finished
    reset from one that had not started."""
    setup.pause()

    async def interrupted(self: Any, *, namespace: str, body: Any) -> None:
        signal.raise_signal(signal.SIGINT)  # as Ctrl-C: asyncio.run cancels the command
        await asyncio.sleep(30)

    monkeypatch.setattr(kubeapi.KubeAPI, "create_event", interrupted)
    assert setup.ehb("reset", "--to-earliest", "--partitions", "0,1") == 130
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "ehb: error: interrupted while posting the Event on the CR, after every partition was "
        "written: partition 0 was reset (5 -> -1); partition 1 was reset (- -> -1)"
    )
    stored = setup.read()
    assert {p: stored[p].sequence_number for p in ("0", "1")} == {"0": -1, "1": -1}
