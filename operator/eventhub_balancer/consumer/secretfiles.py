"""Connection strings kept in files (a Secret mounted as a volume), read again when they change.

A Secret given to a container as env is read once, when the container starts: after a key
rotation the pod would go on with the old key until someone restarts it. Mounted as a volume,
the Secret's keys are files that the kubelet replaces in place within about a minute of the
Secret's change (it swaps the volume's ``..data`` symlink, so the path stays and what it
leads to changes). `SecretFile` keeps the value it last accepted and reads its file again at
most every `CHECK_INTERVAL_S`, comparing contents (a stat would miss a rewrite within the
file system's timestamp granularity, and the read is a few hundred bytes):

- new content that passes the checks the value passed at start becomes the value, and
  `SecretFiles.revision` moves on (and the file's own `SecretFile.revision`): the runtime then
  swaps what that string feeds under its clients (`clients.Clients.renew`);
- content that does not (empty, cut short, the wrong shape, a host the pod may not reach) is
  refused with what to fix (`SecretFiles.problem`, logged once per content), and the value in
  use stays: garbage never costs the pod the clients that may still work.

Nothing here logs or quotes a value: only the setting, the path and what is wrong.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Final

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

#: The longest a new value waits in its file before the pod reads it (on top of the kubelet's
#: own delay, about a minute): one small read per file per interval.
CHECK_INTERVAL_S: Final = 5.0

#: Checks a value, raising with ``field`` named (the checks the env form's value passes).
Check = Callable[[str, str], None]


class SecretFile:
    """One connection string in a file: the value accepted last, and the file's latest word."""

    def __init__(self, path: Path, *, setting: str, check: Check) -> None:
        self.path = path
        self.setting = setting
        #: What messages name: the setting and the file.
        self.field = f"{setting} ({path})"
        self._check = check
        #: Raises `errors.InvalidInput` at start: a file that cannot work fails the pod at once.
        self._seen: str | None = self._read()
        self.value = self._valid(self._seen)
        #: Why the file's current content is not the value (None: it is).
        self.problem: str | None = None
        #: Moves on whenever a new value is taken.
        self.revision = 0

    def _read(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise errors.InvalidInput(
                self.field, "does not exist: mount the Secret there, or fix the path"
            ) from None
        except UnicodeDecodeError:
            raise errors.InvalidInput(
                self.field, "is not UTF-8 text: put the connection string in it"
            ) from None
        except OSError as e:
            raise errors.InvalidInput(self.field, f"cannot be read: {e.strerror}") from None

    def _valid(self, content: str) -> str:
        """The value ``content`` holds (surrounding whitespace and the final newline that
        editors add are not part of it), or `errors.InvalidInput` naming the file."""
        value = content.strip()
        if not value:
            raise errors.InvalidInput(self.field, "is empty: put the connection string in it")
        try:
            self._check(value, self.field)
        except errors.EventHubBalancerError as e:
            if str(e).startswith(self.field):
                raise
            raise errors.InvalidInput(self.field, str(e)) from None
        return value

    def poll(self) -> bool:
        """Read the file; True when it holds a new value that passes the checks (now
        `value`). Unchanged content is neither checked nor logged again."""
        content: str | None = None
        try:
            content = self._read()
            if content == self._seen:
                return False
            value = self._valid(content)
        except errors.InvalidInput as e:
            if str(e) != self.problem:
                logger.error("%s; the pod goes on with the connection string it read before", e)
            self._seen, self.problem = content, str(e)
            return False
        self._seen, self.problem = content, None
        if value == self.value:
            return False
        self.value = value
        self.revision += 1
        logger.info("%s holds a new connection string: the pod switches to it", self.field)
        return True


class SecretFiles:
    """The pod's credential files (none, one or both), read again at a bounded pace."""

    def __init__(
        self,
        *,
        eventhub: SecretFile | None = None,
        blob: SecretFile | None = None,
        interval: float = CHECK_INTERVAL_S,
    ) -> None:
        self.eventhub = eventhub
        self.blob = blob
        self.interval = interval
        #: Moves on whenever a file's new value is taken: clients opened at an older revision
        #: hold a connection string the pod no longer uses.
        self.revision = 0
        self._read_at: float | None = None

    @property
    def files(self) -> tuple[SecretFile, ...]:
        return tuple(f for f in (self.eventhub, self.blob) if f is not None)

    def refresh(self) -> int:
        """The revision, after reading the files again if `interval` passed since the last
        read (on the event loop's clock)."""
        now = asyncio.get_running_loop().time()
        if not self.files or (self._read_at is not None and now - self._read_at < self.interval):
            return self.revision
        self._read_at = now
        changed = [f.poll() for f in self.files]
        if any(changed):
            self.revision += 1
        return self.revision

    @property
    def revisions(self) -> tuple[int, int]:
        """The revisions of the Event Hubs file and of the storage file (0: none)."""
        eventhub, blob = self.eventhub, self.blob
        return (eventhub.revision if eventhub else 0, blob.revision if blob else 0)

    @property
    def problem(self) -> str | None:
        """What to fix in the files whose content is refused (None: nothing)."""
        return "; ".join(f.problem for f in self.files if f.problem) or None
