"""``ehb deadletters replay`` as processes that race or die: two admins replaying the same
dead letters at once, and a replay killed part-way, then run again. The CR and its Secrets
are on the local Kubernetes API, the dead letters on Azurite; the handler is a file that
records each call and then waits, so that the races are wide open."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import blobs, deadletters, deliveries
from eventhub_balancer_devstack import azurite as azurite_launcher
from tests.support.fixtures.azurite import unique_container_name

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
NAMESPACE = "shop"
FQNS = "shop.servicebus.windows.net"
HUB = "orders"

HANDLER = """
import json, os, time

def process(events, context):
    with open(os.environ["REPLAY_RECORD"], "a") as out:
        out.write(json.dumps({"first": context.first_sequence_number, "pid": os.getpid()}) + "\\n")
    time.sleep(float(os.environ.get("REPLAY_PAUSE", "0")))
    if str(context.first_sequence_number) in os.environ.get("REPLAY_REFUSE", "").split(","):
        # Two lines, as a Java exception's text is: the error line stays one line.
        raise ValueError("still broken\\n  at the second line of its message")
"""


async def _write(connection_string: str, container: str) -> None:
    async with blobs.open_container(
        container_name=container, connection_string=connection_string
    ) as client:
        await blobs.ensure_container(client)
        writer = deadletters.DeadLetterWriter(
            client, fully_qualified_namespace=FQNS, eventhub_name=HUB, consumer_group="$Default"
        )
        for first in (3, 7):
            event = deliveries.ReceivedEvent(
                partition="0",
                sequence_number=first,
                offset=str(first),
                enqueued_time=T0,
                partition_key=None,
                properties={},
                body=b"order",
            )
            await writer.write([event], error="ValueError: bad", attempts=3, pod="p", epoch=1)


@pytest.fixture
def replay(
    azurite: azurite_launcher.Azurite, kube_client: Any, kubeconfig: Path, tmp_path: Path
) -> Any:
    """Two dead letters (0/3-3, 0/7-7) of shop/orders; returns a function that starts
    ``ehb deadletters replay orders ...`` as a process with the recording handler."""
    import kubernetes

    container = unique_container_name("dlr")
    asyncio.run(_write(azurite.connection_string, container))
    core = kubernetes.client.CoreV1Api(kube_client)
    for name in ("orders-blob", "orders-eh"):
        value = (
            azurite.connection_string
            if name == "orders-blob"
            else f"Endpoint=sb://{FQNS}/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0"
        )
        secret: Any = {
            "metadata": {"name": name},
            "data": {"connectionString": base64.b64encode(value.encode()).decode()},
        }
        core.create_namespaced_secret(NAMESPACE, secret)
    reference = {"connectionStringSecretRef": {"name": "orders-eh", "key": "connectionString"}}
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
                    "fullyQualifiedNamespace": FQNS,
                    "name": HUB,
                    "credentials": reference,
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
    module = f"racehandler_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(HANDLER)
    record = tmp_path / "record.jsonl"

    def start(*args: str, pause: float = 0.0, refuse: str = "") -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "REPLAY_RECORD": str(record),
            "REPLAY_PAUSE": str(pause),
            "REPLAY_REFUSE": refuse,
        }
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eventhub_balancer",
                "deadletters",
                "replay",
                "orders",
                *args,
                "-n",
                NAMESPACE,
                "--kubeconfig",
                str(kubeconfig),
                "--through-handler",
                f"{module}:process",
                "--handler-path",
                str(tmp_path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def calls() -> list[dict[str, Any]]:
        if not record.exists():
            return []
        return [json.loads(line) for line in record.read_text().splitlines()]

    start.calls = calls  # type: ignore[attr-defined]
    start.record = str(record)  # type: ignore[attr-defined]
    start.list_command = [  # type: ignore[attr-defined]
        sys.executable,
        "-m",
        "eventhub_balancer",
        "deadletters",
        "list",
        "orders",
        "-n",
        NAMESPACE,
        "--kubeconfig",
        str(kubeconfig),
    ]
    return start


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def _listed(replay: Any) -> dict[str, tuple[str | None, str | None]]:
    """blob -> (replayedTime, replayingSince), as ``ehb deadletters list --json`` prints them."""
    done = subprocess.run(
        [*replay.list_command, "--json"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return {r["blob"]: (r["replayedTime"], r["replayingSince"]) for r in json.loads(done.stdout)}


def test_two_admins_replaying_at_once_replay_each_dead_letter_once(replay: Any) -> None:
    first = replay("--all", pause=3.0)
    second = replay("--all", pause=3.0)
    results = [_finish(first), _finish(second)]
    handled = sorted(call["first"] for call in replay.calls())
    assert handled == [3, 7], (handled, results)
    # A run that found a blob claimed by the other (read before the claim, or after it)
    # says so, one line each on stderr, and exits 1.
    said = ("it changed while this replay ran", "has not finished: another run is replaying it")
    for status, out, err in results:
        if status != 0:
            assert status == 1, err
            for line in err.splitlines():
                assert line.startswith("ehb: error: 0/"), err
                assert any(words in line for words in said), err
            assert "skipped (" in out
    assert [status for status, _, _ in results] != [0, 0]
    assert all(replayed and not since for replayed, since in _listed(replay).values())


def test_a_replay_killed_in_its_handler_is_not_replayed_again_unasked(replay: Any) -> None:
    process = replay("--all", pause=30.0)
    deadline = time.monotonic() + 60
    while not replay.calls() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert replay.calls(), "the handler was never called"
    process.send_signal(signal.SIGKILL)
    _finish(process)  # reaped, and its pipes closed

    listed = _listed(replay)
    assert listed["0/3-3"][0] is None
    assert listed["0/3-3"][1]  # claimed, never marked
    assert listed["0/7-7"] == (None, None)

    status, out, err = _finish(replay("--all"))
    assert [call["first"] for call in replay.calls()] == [3, 7]
    assert status == 1
    (line,) = err.splitlines()
    assert line.startswith("ehb: error: 0/3-3: a replay started at ")
    assert "give --force to replay it again" in line
    assert "skipped (unfinished replay: --force)" in out

    # Named, it is refused before anything is replayed; with --force it is replayed.
    status, _, err = _finish(replay("0/3-3"))
    assert status == 2, err
    assert "give --force" in err
    status, out, err = _finish(replay("0/3-3", "--force"))
    assert status == 0, err
    assert [call["first"] for call in replay.calls()] == [3, 7, 3]
    assert all(replayed and not since for replayed, since in _listed(replay).values())


def test_a_refused_replay_leaves_the_dead_letter_unmarked(replay: Any) -> None:
    status, _, err = _finish(replay("--all", refuse="7"))
    assert status == 1
    assert "the handler failed on 0/7-7 (ValueError: still broken)" in err
    listed = _listed(replay)
    assert listed["0/3-3"][0]
    assert not listed["0/3-3"][1]
    assert listed["0/7-7"] == (None, None)  # neither marked nor claimed
    status, _, err = _finish(replay("--all"))
    assert status == 0, err
    assert [call["first"] for call in replay.calls()] == [3, 7, 7]


def test_a_replay_stopped_by_ctrl_c_says_which_dead_letter_it_left_claimed(
    replay: Any,
) -> None:
    process = replay("--all", pause=2.0)
    deadline = time.monotonic() + 60
    while not replay.calls() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert replay.calls(), "the handler was never called"
    process.send_signal(signal.SIGINT)
    status, out, err = _finish(process)
    assert status == 130
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("ehb: error: interrupted while replaying 0/3-3: "), line
    assert "replay it with --force" in line
    assert "nothing was replayed before it" in line
    listed = _listed(replay)
    assert listed["0/3-3"][1]  # claimed, as the line says
    assert listed["0/7-7"] == (None, None)


def test_a_replay_stopped_part_way_names_what_it_replayed_and_what_is_left(replay: Any) -> None:
    # Named blobs: running the same command again would refuse 0/3-3 as replayed, and
    # --force would replay it a second time; the error says which to name instead.
    status, _, err = _finish(replay("0/3-3", "0/7-7", refuse="7"))
    assert status == 1, err
    (line,) = err.splitlines()
    assert line.startswith("ehb: error: the handler failed on 0/7-7 (ValueError: still broken)")
    assert "replayed before it: 0/3-3" in line, line
    assert "not replayed: 0/7-7: replay those" in line, line
    # The line to run is the command given, its flags kept (it named `ehb deadletters replay
    # orders 0/7-7`, which is refused: no --to-hub or --through-handler), and it finishes.
    finish = shlex.split(line.split("replay those: `", 1)[1].removesuffix("`"))
    assert finish[:4] == ["ehb", "deadletters", "replay", "orders"], line
    assert finish[-1] == "0/7-7", line
    assert "--through-handler" in finish, line
    assert "--kubeconfig" in finish, line
    done = subprocess.run(
        [sys.executable, "-m", "eventhub_balancer", *finish[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "REPLAY_RECORD": replay.record},
    )
    assert done.returncode == 0, done.stderr
    assert [call["first"] for call in replay.calls()] == [3, 7, 7]


def test_a_replay_stopped_at_its_first_dead_letter_says_nothing_was_replayed(replay: Any) -> None:
    status, _, err = _finish(replay("--all", refuse="3"))
    assert status == 1, err
    (line,) = err.splitlines()
    assert "nothing was replayed before it" in line, line
    assert "not replayed: 0/3-3, 0/7-7: run the same command again" in line, line
    assert _listed(replay) == {"0/3-3": (None, None), "0/7-7": (None, None)}


def test_a_replay_stopped_part_way_with_json_still_prints_its_one_document(
    replay: Any,
) -> None:
    """A script given ``--json`` got nothing on stdout when the replay stopped: not which dead
    letters were replayed before the stop. Now it gets the document, every blob named."""
    status, out, err = _finish(replay("0/3-3", "0/7-7", "--json", refuse="7"))
    assert status == 1, err
    assert [(r["blob"], r["result"]) for r in json.loads(out)] == [
        ("0/3-3", "replayed"),
        ("0/7-7", "failed"),
    ]
    (line,) = err.splitlines()
    assert "replay those: `ehb deadletters replay orders" in line, line
