"""An import file is checked whole before anything is written: every position it holds is
one the SDK and KEDA can read back, and every problem names its place.

(The other checks of the document are in tests/adapters/wire/test_checkpoint_reset.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import checkpointdocuments


def document(*checkpoints: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "EventHubCheckpoints", "version": 1, "checkpoints": list(checkpoints)}


@pytest.mark.parametrize(
    "offset",
    [
        "70\nx",  # refused by the HTTP layer only while writing, after other partitions
        "7a",
        "+5",
        " 5",
        "-2",
        "5.0",
        "\u0663",  # a digit, but not an ASCII one
        "caf\u00e9",
        "9223372036854775808",  # int64's maximum + 1
        "1" * 5000,
        5,
    ],
)
def test_an_offset_is_the_decimal_string_the_sdk_writes(offset: object) -> None:
    checkpoints = document(
        {"partition": "0", "sequenceNumber": 5, "offset": "50"},
        {"partition": "1", "sequenceNumber": 7, "offset": offset},
    )
    with pytest.raises(errors.InvalidInput) as caught:
        checkpointdocuments.parse_import(checkpoints, source="backup.json")
    assert caught.value.field == "backup.json: checkpoints[1].offset"
    assert "decimal string" in caught.value.problem


@pytest.mark.parametrize("offset", ["0", "4096", "-1", "", "9223372036854775807"])
def test_offsets_an_export_holds_are_taken(offset: str) -> None:
    checkpoints = document({"partition": "0", "sequenceNumber": 5, "offset": offset})
    (position,) = checkpointdocuments.parse_import(checkpoints, source="f").values()
    assert position.offset == offset


def test_a_null_offset_of_an_older_export_is_taken_as_unknown() -> None:
    """Exports made before 1 December wrote ``null`` for a checkpoint without an offset (a reset
    between a partition's first and last event writes none): their backups restore."""
    checkpoints = document({"partition": "0", "sequenceNumber": 5, "offset": None})
    (position,) = checkpointdocuments.parse_import(checkpoints, source="f").values()
    assert position.offset == ""


@pytest.mark.parametrize("sequence", [2**63, 2**70, -2])
def test_a_sequence_number_is_an_int64(sequence: int) -> None:
    checkpoints = document({"partition": "0", "sequenceNumber": sequence})
    with pytest.raises(errors.InvalidInput) as caught:
        checkpointdocuments.parse_import(checkpoints, source="f")
    assert caught.value.field == "f: checkpoints[0].sequenceNumber"
    assert "9223372036854775807" in caught.value.problem


def test_the_largest_int64_is_taken() -> None:
    checkpoints = document({"partition": "0", "sequenceNumber": 2**63 - 1})
    (position,) = checkpointdocuments.parse_import(checkpoints, source="f").values()
    assert position.sequence_number == 2**63 - 1
