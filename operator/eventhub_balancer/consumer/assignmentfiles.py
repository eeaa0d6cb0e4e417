"""A consumer without Kubernetes: its assignment in a file, its acknowledgements in another.

``ehb consume --assignment-file`` (a static assignment, a demo, a test that edits the file)
reads a ConfigMap-shaped JSON file instead of the pod's ConfigMap; ``--ack-file`` takes the
acknowledgements the pod would write on it. :func:`check` refuses, before anything starts,
files the source could never use; :class:`FileSource` is the source itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from eventhub_balancer import errors
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import bounds

logger = logging.getLogger(__name__)


def check(path: Path, *, ack_path: Path | None) -> None:
    """Refuse, in one line naming the flag, an assignment file that cannot be read and an
    acknowledgement file that cannot be written: found at the first acknowledgement, they
    stopped the pod with a traceback after it had started on its partitions."""
    if path.is_dir():  # '' is the current directory
        raise errors.InvalidInput(
            "--assignment-file", f"{path} is a directory: give the assignment's JSON file"
        )
    if not path.exists():
        raise errors.InvalidInput("--assignment-file", f"{path} does not exist")
    try:
        with path.open("rb"):
            pass
    except OSError as e:
        raise errors.InvalidInput(
            "--assignment-file", f"cannot read {path} ({e.strerror}): give a file you may read"
        ) from e
    if ack_path is None:
        return
    if ack_path.is_dir():
        raise errors.InvalidInput(
            "--ack-file", f"{ack_path} is a directory: give the path of a file to write"
        )
    if ack_path.resolve() == path.resolve():
        raise errors.InvalidInput(
            "--ack-file",
            "is the assignment file: give another path (the pod never writes its assignment)",
        )
    temporary = _temporary(ack_path)
    try:  # what acknowledge() writes first, then moves into place
        temporary.touch()
        temporary.unlink()
    except OSError as e:
        raise errors.InvalidInput(
            "--ack-file",
            f"cannot write {temporary} ({e.strerror}): give a path in a folder you may write",
        ) from e


def _temporary(ack_path: Path) -> Path:
    """Where an acknowledgement is written whole before it replaces the last one."""
    return ack_path.with_suffix(ack_path.suffix + ".tmp")


class FileSource:
    """A ConfigMap-shaped JSON file, re-read when it changes; acks go to a second file. The
    files are the caller's to `check` first (`launching.build_source`).

    The file is only read: acknowledgements are written to ``ack_path`` (a JSON object with
    the annotations), so that whoever edits the assignment never races with us.
    """

    def __init__(
        self, path: Path, *, ack_path: Path | None = None, poll_seconds: float = 0.2
    ) -> None:
        self.path = path
        self.ack_path = ack_path
        self.poll_seconds = poll_seconds
        self._readable = assignments.Readable(
            f"assignment file {path}", advice=assignments.FILE_ADVICE
        )

    def _parse(self, raw: bytes) -> assignments.Assignment | None:
        """The assignment ``raw`` holds; None while it is not JSON (yet), or its partitions
        cannot be read (`assignments.Readable`)."""
        try:
            body = bounds.loads(raw.decode("utf-8"))
        except ValueError:  # a file caught half-written, maybe inside a UTF-8 character
            logger.warning("assignment file %s is not JSON (yet): keeping the last one", self.path)
            return None
        if not isinstance(body, dict):
            raise errors.InvalidInput(str(self.path), "must hold a JSON object (a ConfigMap)")
        return self._readable.take(assignments.from_configmap(body))

    def _read(self, unreadable: str | None) -> tuple[bytes | None, str | None]:
        """The file's bytes (None: not there now, or unreadable), and why it is unreadable,
        said once for each new reason while the last assignment stands."""
        try:
            return self.path.read_bytes(), None
        except FileNotFoundError:  # between an editor's delete and its write
            return None, None
        except OSError as e:
            why = f"{e.strerror} ({type(e).__name__})"
            if why != unreadable:
                logger.warning(
                    "assignment file %s cannot be read: %s: keeping the last one", self.path, why
                )
            return None, why

    async def updates(self) -> AsyncIterator[assignments.Assignment]:
        # What was last read, good or not (a file left unreadable is said so once, not at
        # every poll), and the last assignment taken (a file put back as it was is no news).
        last_raw: bytes | None = None
        last_taken: bytes | None = None
        unreadable: str | None = None
        while True:
            raw, unreadable = self._read(unreadable)
            if raw is not None and raw != last_raw:
                last_raw = raw
                assignment = self._parse(raw) if raw != last_taken else None
                if assignment is not None:
                    last_taken = raw
                    yield assignment
            await asyncio.sleep(self.poll_seconds)

    async def acknowledge(
        self,
        *,
        applied_generation: int | None,
        released: Mapping[str, int],
        reports: assignments.Reports | None = None,
    ) -> bool:
        if self.ack_path is None:
            return False
        annotations = assignments.acknowledgement_annotations(
            applied_generation=applied_generation, released=released, reports=reports
        )
        temporary = _temporary(self.ack_path)
        try:
            temporary.write_text(json.dumps({"metadata": {"annotations": annotations}}, indent=1))
            temporary.replace(self.ack_path)  # atomic: a reader never sees half a file
        except OSError as e:  # the folder gone, the disk full: retried with backoff
            raise errors.TransientError(
                f"cannot write the acknowledgement file {self.ack_path} ({e.strerror})"
            ) from e
        return True

    def acknowledgement_lost(self) -> bool:
        return False  # the ack file is ours alone
