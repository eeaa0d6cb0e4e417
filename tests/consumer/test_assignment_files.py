"""``ehb consume --assignment-file`` while it runs: a file that cannot be read for a while,
and an acknowledgement file that cannot be written for a while, are said and ridden out,
never a traceback that stops the pod on its partitions.

On fake loop time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer.consumer import acknowledgements, assignmentfiles
from eventhub_balancer.contracts import configmaps
from tests.support import consumerfakes

pytestmark = pytest.mark.looptime


def _write(path: Path, generation: int) -> None:
    path.write_text(json.dumps(consumerfakes.configmap(generation, {"0": (1, "owned")})))


async def test_an_assignment_file_that_cannot_be_read_keeps_the_last_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "assignment.json"
    _write(path, 1)
    updates = assignmentfiles.FileSource(path, poll_seconds=0.2).updates()
    try:
        async with asyncio.timeout(1):
            first = await anext(updates)
        assert first.generation == 1
        # Replaced by a folder (a volume mounted wrong, say): unreadable, not gone.
        path.unlink()
        path.mkdir()
        reader = asyncio.ensure_future(anext(updates))
        await asyncio.sleep(2)  # ten polls of the folder
        assert not reader.done()
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert said == [
            f"assignment file {path} cannot be read: Is a directory (IsADirectoryError): "
            "keeping the last one"
        ]
        path.rmdir()
        _write(path, 2)
        async with asyncio.timeout(1):
            second = await reader
        assert second.generation == 2
    finally:
        await updates.aclose()


async def test_an_acknowledgement_file_that_cannot_be_written_is_retried_until_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "acks"
    folder.mkdir()
    ack_path = folder / "acks.json"
    assignment = tmp_path / "assignment.json"
    _write(assignment, 1)
    assignmentfiles.check(assignment, ack_path=ack_path)
    assert list(folder.iterdir()) == []  # the check's probe leaves nothing behind
    source = assignmentfiles.FileSource(assignment, ack_path=ack_path)
    shutil.rmtree(folder)  # the folder goes after the start
    with pytest.raises(errors.TransientError, match=f"acknowledgement file {ack_path} "):
        await source.acknowledge(applied_generation=1, released={})

    # The runtime's writer retries it with backoff, with a warning rather than a traceback.
    acks = acknowledgements.Acknowledgements(source, min_interval=0)
    await acks.write(applied_generation=1, released={}, reports={})
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1
    assert "acknowledgement not written (1 attempt(s)" in said[0]
    assert f"cannot write the acknowledgement file {ack_path} (No such file" in said[0]
    folder.mkdir()
    await asyncio.sleep(acknowledgements.RETRY_MAX_S)
    await acks.write(applied_generation=1, released={}, reports={})
    written = json.loads(ack_path.read_text())["metadata"]["annotations"]
    assert written[configmaps.ANNOTATION_APPLIED_GENERATION] == "1"
