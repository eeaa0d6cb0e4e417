"""``ehb checkpoints list`` and ``ehb bench checkpoints`` (output shape, never timings)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import re
import subprocess
import sys
from typing import Any

import pytest

from eventhub_balancer import cli
from eventhub_balancer.adapters import blobs
from eventhub_balancer.adapters import checkpointing as cp
from eventhub_balancer.cli import checkpoints as list_command
from eventhub_balancer.contracts import checkpointblobs
from eventhub_balancer_devstack import azurite as azurite_launcher
from tests.support import paths
from tests.support.fixtures.azurite import unique_container_name

REPOSITORY = paths.REPOSITORY


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0, "0s"), (59, "59s"), (60, "1m"), (3599, "59m"), (7200, "2h"), (172800, "2d")],
)
def test_ages_print_like_kubectl(seconds: float | None, shown: str) -> None:
    assert list_command.format_age(seconds) == shown


def test_rows_and_table() -> None:
    now = datetime.datetime(2024, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
    checkpoint = cp.Checkpoint(
        partition="3",
        offset="4096",
        sequence_number=41,
        owner_id="pod-a",
        epoch=2,
        etag="e",
        last_modified=now - datetime.timedelta(seconds=125),
    )
    dying = dataclasses.replace(
        checkpoint, partition="4", deaths=checkpointblobs.Deaths(first=42, attempts=3)
    )
    row, counted = list_command.rows([checkpoint, dying], now=now)
    assert row["ageSeconds"] == 125
    assert (row["deaths"], counted["deaths"]) == (None, {"first": 42, "attempts": 3})
    lines = list_command.table([row, counted]).splitlines()
    assert lines[0].split() == [
        "PARTITION",
        "SEQUENCE",
        "OFFSET",
        "OWNER",
        "EPOCH",
        "AGE",
        "DEATHS",
    ]
    assert lines[1].split() == ["3", "41", "4096", "pod-a", "2", "2m", "-"]
    # The batch after the checkpoint killed a process: 3 attempts of it from 42 so far.
    assert re.split(r"\s{2,}", lines[2]) == ["4", "41", "4096", "pod-a", "2", "2m", "3 from 42"]


async def _write_checkpoints(connection_string: str, container_name: str) -> None:
    async with blobs.open_container(
        container_name=container_name, connection_string=connection_string
    ) as container:
        await blobs.ensure_container(container)
        store = cp.CheckpointStore(
            container,
            fully_qualified_namespace="shop.servicebus.windows.net",
            eventhub_name="orders",
            consumer_group="$Default",
            owner_id="pod-a",
        )
        for partition in ("0", "1"):
            await store.fence(partition, 3)
            await store.update(
                partition, offset=f"{partition}00", sequence_number=int(partition) + 7
            )
        await store.record_deaths("1", checkpointblobs.Deaths(first=9, attempts=2))


@pytest.mark.integration
def test_checkpoints_list_prints_a_table_and_json(
    azurite: azurite_launcher.Azurite,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    container = unique_container_name()
    asyncio.run(_write_checkpoints(azurite.connection_string, container))
    where = [
        "--container",
        container,
        "--eventhub-namespace",
        "shop.servicebus.windows.net",
        "--hub",
        "orders",
    ]

    assert (
        cli.main(["checkpoints", "list", "--connection-string", azurite.connection_string, *where])
        == 0
    )
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == [
        "PARTITION",
        "SEQUENCE",
        "OFFSET",
        "OWNER",
        "EPOCH",
        "AGE",
        "DEATHS",
    ]
    assert [
        re.split(r"\s{2,}", line)[:5] + re.split(r"\s{2,}", line)[6:] for line in table[1:]
    ] == [
        ["0", "7", "000", "pod-a", "3", "-"],
        ["1", "8", "100", "pod-a", "3", "2 from 9"],
    ]

    monkeypatch.setenv(list_command.CONNECTION_STRING_ENV, azurite.connection_string)
    assert cli.main(["checkpoints", "list", "--json", *where]) == 0
    out = capsys.readouterr().out
    assert azurite_launcher.ACCOUNT_KEY not in out
    listed = json.loads(out)
    assert [
        (r["partition"], r["sequenceNumber"], r["offset"], r["owner"], r["epoch"]) for r in listed
    ] == [
        ("0", 7, "000", "pod-a", 3),
        ("1", 8, "100", "pod-a", 3),
    ]
    assert all(0 <= r["ageSeconds"] < 300 for r in listed)
    assert [r["deaths"] for r in listed] == [None, {"first": 9, "attempts": 2}]


def test_checkpoints_list_without_credentials_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(list_command.CONNECTION_STRING_ENV, raising=False)
    status = cli.main(
        ["checkpoints", "list", "--container", "cps", "--eventhub-namespace", "n", "--hub", "h"]
    )
    assert status == 2
    assert "--connection-string" in capsys.readouterr().err


@pytest.mark.integration
def test_bench_checkpoints_prints_the_two_figures_as_json() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "bench",
            "checkpoints",
            "--json",
            "--updates",
            "64",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPOSITORY,
    )
    assert done.returncode == 0, done.stderr
    figures: dict[str, Any] = json.loads(done.stdout)
    assert set(figures) == {"updates_per_s_1_partition", "updates_per_s_32_partitions"}
    assert all(isinstance(v, float) and v > 0 for v in figures.values())
