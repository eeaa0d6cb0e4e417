"""A scenario's temporary work directory goes away however the start fails."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from eventhub_balancer_devstack.scenarios import sites


def test_a_stack_that_cannot_be_made_leaves_no_work_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with (
        pytest.raises(ValueError, match="1 to 1024 partitions"),
        sites.local_stack(hubs={"orders": 2000}),
    ):
        pass
    assert list(tmp_path.iterdir()) == []
