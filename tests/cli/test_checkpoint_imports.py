"""``ehb checkpoints import``: a file it cannot use is one line that says what to change, and
nothing is written before the whole file was checked.

The consumer, its hub and its container are fakes (`pausedconsumers`); the writes against
Azurite are in tests/adapters/wire/test_checkpoint_reset.py.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import pausedconsumers
from tests.support.pausedconsumers import ehb


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> pausedconsumers.PausedConsumer:
    return pausedconsumers.install(monkeypatch)


def export(path: Path, *checkpoints: dict[str, Any]) -> str:
    path.write_text(
        json.dumps({"kind": "EventHubCheckpoints", "version": 1, "checkpoints": checkpoints})
    )
    return str(path)


def imported(capsys: pytest.CaptureFixture[str], file: str, *flags: str) -> tuple[int, str]:
    status, _, err = ehb(capsys, "checkpoints", "import", "orders", file, "-n", "shop", *flags)
    return status, err


@pytest.mark.parametrize(
    ("second", "field"),
    [
        ({"partition": "1", "sequenceNumber": 7, "offset": "70\nx"}, "checkpoints[1].offset"),
        ({"partition": "1", "sequenceNumber": 2**70}, "checkpoints[1].sequenceNumber"),
    ],
)
def test_a_bad_position_is_refused_before_anything_is_written(
    consumer: pausedconsumers.PausedConsumer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    second: dict[str, Any],
    field: str,
) -> None:
    first = {"partition": "0", "sequenceNumber": 5, "offset": "50"}
    file = export(tmp_path / "orders.json", first, second)
    status, err = imported(capsys, file)
    assert (status, err.splitlines()[0]) == (2, err.strip())
    assert err.startswith(f"ehb: error: {file}: {field}: ")
    assert consumer.container.opened == 0


def test_an_export_saved_as_utf16_says_how_to_save_it(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "orders.json"
    path.write_bytes('{"kind": "EventHubCheckpoints"}'.encode("utf-16"))
    status, err = imported(capsys, str(path), "--dry-run")
    assert status == 2
    assert err.startswith(f"ehb: error: {path}: is not UTF-8 text")
    assert "Out-File -Encoding utf8" in err


def test_stdin_that_is_not_utf8_is_refused(
    consumer: pausedconsumers.PausedConsumer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe{"), encoding="utf-8"))
    status, err = imported(capsys, "-", "--dry-run")
    assert status == 2
    assert err.startswith("ehb: error: -: is not UTF-8 text")


def test_json_nested_past_the_decoder_is_not_an_export(
    consumer: pausedconsumers.PausedConsumer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "orders.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    status, err = imported(capsys, str(path), "--dry-run")
    assert status == 2
    assert err.startswith(f"ehb: error: {path}: is not an export document")
