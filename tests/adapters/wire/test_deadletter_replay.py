"""``ehb deadletters list | show | replay`` end to end: the CR and its Secrets on the local
Kubernetes API, the dead letters on Azurite, and for ``--to-hub`` the Event Hubs emulator."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub.aio import EventHubProducerClient

from eventhub_balancer import cli
from eventhub_balancer.adapters import blobs, deadletters, deadlettersends, deliveries
from eventhub_balancer_devstack import azurite as azurite_launcher
from tests.support import eventhubclients
from tests.support.fixtures.azurite import unique_container_name
from tests.support.fixtures.eventhubs import EventHubTarget

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
NAMESPACE = "shop"


@pytest.fixture
def eventhubs_hub_partitions() -> int:
    return 2


def _events(
    partition: str, first: int, last: int, key: str | None
) -> list[deliveries.ReceivedEvent]:
    return [
        deliveries.ReceivedEvent(
            partition=partition,
            sequence_number=n,
            offset=str(n * 100),
            enqueued_time=T0,
            partition_key=key,
            properties={"n": n},
            body=f"order {n}".encode(),
        )
        for n in range(first, last + 1)
    ]


async def _write(connection_string: str, container: str, fqns: str, hub: str) -> None:
    async with blobs.open_container(
        container_name=container, connection_string=connection_string
    ) as client:
        await blobs.ensure_container(client)
        writer = deadletters.DeadLetterWriter(
            client, fully_qualified_namespace=fqns, eventhub_name=hub, consumer_group="$Default"
        )
        await writer.write(
            _events("1", 5, 6, None),
            error="ValueError: no such customer\ncustomer 17 was deleted",
            attempts=3,
            pod="orders-0",
            epoch=4,
        )
        await writer.write(
            _events("0", 3, 3, "customer-9"),
            error="KeyError: 'sku'",
            attempts=3,
            pod="orders-1",
            epoch=2,
        )


def _consumer(
    kube_client: Any, *, fqns: str, hub: str, container: str, blob_cs: str, hub_cs: str
) -> None:
    """The CR and the two Secrets it names, as a user's install has them."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(kube_client)
    for name, value in (("orders-blob", blob_cs), ("orders-eh", hub_cs)):
        secret: Any = {
            "metadata": {"name": name},
            "data": {"connectionString": base64.b64encode(value.encode()).decode()},
        }
        core.create_namespaced_secret(NAMESPACE, secret)
    kubernetes.client.CustomObjectsApi(kube_client).create_namespaced_custom_object(
        "eventhub-balancer.dev",
        "v1alpha1",
        NAMESPACE,
        "eventhubconsumers",
        {
            "apiVersion": "eventhub-balancer.dev/v1alpha1",
            "kind": "EventHubConsumer",
            "metadata": {"name": "orders"},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": fqns,
                    "name": hub,
                    "credentials": {
                        "connectionStringSecretRef": {
                            "name": "orders-eh",
                            "key": "connectionString",
                        }
                    },
                },
                "checkpointStore": {
                    "containerName": container,
                    "credentials": {
                        "connectionStringSecretRef": {
                            "name": "orders-blob",
                            "key": "connectionString",
                        }
                    },
                },
                "selector": {"matchLabels": {"app": "orders"}},
                "processing": {"onFailure": "deadLetter"},
            },
        },
    )


@pytest.fixture
def stack(
    azurite: azurite_launcher.Azurite, kube_client: Any, eventhubs_hub: EventHubTarget
) -> EventHubTarget:
    """A consumer with two dead letters: 1/5-6 (no partition key) and 0/3-3 (keyed)."""
    container = unique_container_name("dl")
    fqns = eventhubs_hub.emulator.fully_qualified_namespace
    asyncio.run(_write(azurite.connection_string, container, fqns, eventhubs_hub.name))
    _consumer(
        kube_client,
        fqns=fqns,
        hub=eventhubs_hub.name,
        container=container,
        blob_cs=azurite.connection_string,
        hub_cs=eventhubs_hub.connection_string,
    )
    return eventhubs_hub


def ehb(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(["deadletters", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_list_and_show_read_the_coordinates_and_credentials_from_the_cr(
    stack: EventHubTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = ehb(capsys, "list", "orders", "-n", NAMESPACE, "--json")
    assert status == 0
    rows = json.loads(out)  # exactly one JSON document
    assert [
        (r["blob"], r["partition"], r["firstSequenceNumber"], r["lastSequenceNumber"], r["events"])
        for r in rows
    ] == [("0/3-3", "0", 3, 3, 1), ("1/5-6", "1", 5, 6, 2)]
    assert [(r["pod"], r["error"], r["replayedTime"]) for r in rows] == [
        ("orders-1", "KeyError: 'sku'", None),
        ("orders-0", "ValueError: no such customer", None),
    ]

    status, out, _ = ehb(capsys, "list", "orders", "-n", NAMESPACE, "--partition", "1")
    lines = out.splitlines()
    assert lines[0].split() == [
        "BLOB", "PARTITION", "SEQUENCES", "EVENTS", "WHEN", "POD", "REPLAYED", "ERROR"
    ]  # fmt: skip
    assert lines[1].split()[:4] == ["1/5-6", "1", "5-6", "2"]
    assert len(lines) == 2

    status, out, _ = ehb(capsys, "show", "orders", "-n", NAMESPACE, "1/5-6", "--json")
    shown = json.loads(out)
    assert shown["error"] == "ValueError: no such customer\ncustomer 17 was deleted"
    assert [e["body"] for e in shown["body"]["events"]] == ["order 5", "order 6"]

    status, out, _ = ehb(capsys, "show", "orders", "-n", NAMESPACE, "1/5-6")
    assert "ValueError: no such customer\n    customer 17 was deleted" in out
    assert "#6 offset 600" in out
    assert "body (utf-8): order 6" in out

    status, _, err = ehb(capsys, "show", "orders", "-n", NAMESPACE, "1/7")
    assert status == 2
    assert "BLOB:" in err
    status, _, err = ehb(capsys, "show", "orders", "-n", NAMESPACE, "1/7-8")
    assert status == 1
    assert "no such blob" in err


HANDLER = """
import json, os

def process(events, context):
    with open(os.environ["REPLAY_RECORD"], "a") as out:
        out.write(json.dumps({
            "bodies": [e.body.decode() for e in events],
            "properties": [dict(e.properties) for e in events],
            "partition": context.partition,
            "first": context.first_sequence_number,
            "consumer": context.consumer,
        }) + "\\n")
"""


def test_replay_through_a_handler_marks_then_needs_force_then_deletes(
    stack: EventHubTarget,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = f"replayhandler_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(HANDLER)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("REPLAY_RECORD", str(record))
    through = ["--through-handler", f"{module}:process", "--handler-path", str(tmp_path)]
    where = ["orders", "-n", NAMESPACE]

    status, out, _ = ehb(
        capsys, "replay", "orders", "1/5-6", "-n", NAMESPACE, *through, "--dry-run", "--json"
    )
    assert status == 0
    assert json.loads(out) == [
        {
            "blob": "1/5-6",
            "name": json.loads(out)[0]["name"],
            "events": 2,
            "to": f"handler:{module}:process",
            "result": "would replay",
        }
    ]
    assert not record.exists()

    status, out, _ = ehb(capsys, "replay", "orders", "1/5-6", "-n", NAMESPACE, *through)
    assert status == 0
    assert "replayed" in out
    (call,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert call == {
        "bodies": ["order 5", "order 6"],
        "properties": [{"n": 5}, {"n": 6}],
        "partition": "1",
        "first": 5,
        "consumer": "orders",
    }
    status, out, _ = ehb(capsys, "list", *where, "--json")
    assert [r["replayedTo"] for r in json.loads(out)] == [None, f"handler:{module}:process"]

    # A second replay of the same blob is a deliberate act.
    status, _, err = ehb(capsys, "replay", "orders", "1/5-6", "-n", NAMESPACE, *through)
    assert status == 2
    assert "--force" in err
    # --all skips what was replayed and replays the rest.
    status, out, _ = ehb(capsys, "replay", *where, "--all", *through, "--json")
    assert [(r["blob"], r["result"]) for r in json.loads(out)] == [
        ("0/3-3", "replayed"),
        ("1/5-6", "skipped (replayed before: --force)"),
    ]
    status, out, _ = ehb(
        capsys, "replay", "orders", "1/5-6", "-n", NAMESPACE, *through, "--force", "--delete-after"
    )
    assert status == 0
    assert "replayed, deleted" in out
    assert len(record.read_text().splitlines()) == 3
    status, out, _ = ehb(capsys, "list", *where, "--json")
    assert [r["blob"] for r in json.loads(out)] == ["0/3-3"]


async def _counts(connection_string: str, partitions: int) -> dict[str, int]:
    async with EventHubProducerClient.from_connection_string(connection_string) as producer:
        found = {}
        for p in range(partitions):
            props = await producer.get_partition_properties(str(p))
            found[str(p)] = 0 if props["is_empty"] else props["last_enqueued_sequence_number"] + 1
        return found


def test_replay_to_the_hub_sends_the_events_again_marked_as_replays(
    stack: EventHubTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["orders", "-n", NAMESPACE]
    status, out, _ = ehb(capsys, "replay", *where, "--all", "--to-hub", "--dry-run")
    assert status == 0
    assert asyncio.run(_counts(stack.connection_string, 2)) == {"0": 0, "1": 0}

    status, out, err = ehb(capsys, "replay", *where, "--all", "--to-hub", "--json")
    assert status == 0, err
    assert [(r["blob"], r["to"], r["result"]) for r in json.loads(out)] == [
        ("0/3-3", "hub", "replayed"),
        ("1/5-6", "hub", "replayed"),
    ]
    counts = asyncio.run(_counts(stack.connection_string, 2))
    assert sum(counts.values()) == 3
    received = {
        p: asyncio.run(eventhubclients.receive(stack.connection_string, partition_id=p, count=n))
        for p, n in counts.items()
        if n
    }
    # Without a partition key an event goes back to the partition it came from, in order.
    unkeyed = [e for e in received["1"] if e.partition_key is None]
    assert [e.body_as_str() for e in unkeyed] == ["order 5", "order 6"]
    keyed = [e for events in received.values() for e in events if e.partition_key is not None]
    assert [(e.partition_key, e.body_as_str()) for e in keyed] == [(b"customer-9", "order 3")]
    prefix = f"{stack.emulator.fully_qualified_namespace}/{stack.name}/$default/deadletter/".lower()
    assert {
        (e.properties[b"n"], e.properties[deadlettersends.REPLAY_PROPERTY.encode()].decode())
        for events in received.values()
        for e in events
    } == {(3, prefix + "0/3-3.json"), (5, prefix + "1/5-6.json"), (6, prefix + "1/5-6.json")}

    status, out, _ = ehb(capsys, "list", *where, "--json")
    assert [r["replayedTo"] for r in json.loads(out)] == ["hub", "hub"]


def test_list_as_a_process_prints_exactly_one_json_document(
    stack: EventHubTarget, kubeconfig: Path
) -> None:
    """``ehb deadletters list --json`` as users run it: stdout is the JSON and nothing else."""
    where = ["-n", NAMESPACE, "--kubeconfig", str(kubeconfig)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "deadletters",
            "list",
            "orders",
            "--json",
            *where,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["blob"] for r in rows] == ["0/3-3", "1/5-6"]
