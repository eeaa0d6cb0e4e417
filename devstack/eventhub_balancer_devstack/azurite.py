"""Azurite, the local Blob Storage, run as a child process of the project.

Tests, the demo and ``ehb local blob`` need a real blob service that speaks the wire protocol
(conditional writes, metadata, listings) without Azure. Azurite is installed by ``make node``
into the repository's ``node_modules``; this module starts it on 127.0.0.1, waits until it
accepts connections, and stops it (with its process group) reliably.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from eventhub_balancer import errors
from eventhub_balancer_devstack import parentdeaths

logger = logging.getLogger(__name__)

#: The repository root: this file is devstack/eventhub_balancer_devstack/azurite.py.
REPOSITORY = Path(__file__).resolve().parents[2]

#: The storage emulator's well-known development account, documented by Microsoft and the same
#: in every Azurite installation: it is not a secret.
ACCOUNT_NAME = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

#: Azurite answers in about 1 s; 10 s leaves room for a loaded 2-core machine.
START_TIMEOUT_S = 10.0

#: Picking a free port and handing it to another process races with other processes; a few
#: attempts make a collision vanishingly unlikely.
BIND_ATTEMPTS = 3

#: How long a SIGTERM may take before the process group gets SIGKILL.
STOP_TIMEOUT_S = 5.0


def connection_string(*, host: str, port: int) -> str:
    """The connection string of an Azurite blob endpoint (the development account)."""
    return (
        "DefaultEndpointsProtocol=http;"
        f"AccountName={ACCOUNT_NAME};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint=http://{host}:{port}/{ACCOUNT_NAME};"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the caller must tolerate a bind race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def taken(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` now (a socket in TIME_WAIT does not count:
    a service started there would bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return True
            raise
    return False


class Azurite:
    """One ``azurite-blob`` process on ``host:port``.

    ``port=0`` picks a free port. ``location=None`` keeps everything in memory
    (``--inMemoryPersistence``); a directory keeps blobs across restarts.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        location: Path | None = None,
        node_modules: Path = REPOSITORY / "node_modules",
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._port = port
        # Absolute: Azurite runs in the location (its own files land there), where a relative
        # path would name a folder inside it, and its parser reads '-1' as a flag.
        self.location = None if location is None else location.absolute()
        self.node_modules = node_modules
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def executable(self) -> Path:
        return self.node_modules / ".bin" / "azurite-blob"

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("Azurite is not started: its port is chosen at start()")
        return self._port

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}/{ACCOUNT_NAME}"

    @property
    def connection_string(self) -> str:
        return connection_string(host=self.host, port=self.port)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self, port: int) -> list[str]:
        args = [
            str(self.executable),
            "--blobHost",
            self.host,
            "--blobPort",
            str(port),
            "--loose",
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
        ]
        if self.location is None:
            args.append("--inMemoryPersistence")
        else:
            args += ["--location", str(self.location)]
        return args

    def start(self) -> Azurite:
        if self.running:
            return self
        if not self.executable.exists():
            raise errors.ConfigurationError(
                f"Azurite is not installed: {self.executable} is missing; "
                "run `make node` (or `npm install`) in the repository"
            )
        if self.location is not None:
            self.location.mkdir(parents=True, exist_ok=True)
        if self._requested_port and taken(self.host, self._requested_port):
            # Azurite would exit on the bind, but the port answers: it must not pass for
            # Azurite (another `ehb local up`'s, or anything else listening there).
            raise OSError(errno.EADDRINUSE, f"{self.host}:{self._requested_port} is taken")
        attempts = BIND_ATTEMPTS if self._requested_port == 0 else 1
        last_output = ""
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port(self.host)
            if self._launch(port):
                self._port = port
                logger.info("Azurite is listening on %s:%d", self.host, port)
                return self
            last_output = self._output_tail()
            self._terminate()
            logger.info("Azurite did not start on port %d (attempt %d)", port, attempt)
        raise errors.ConfigurationError(
            f"Azurite did not start on {self.host} within {self.start_timeout:.0f} s "
            f"({attempts} attempt(s)); its output: {last_output.strip() or '(none)'}"
        )

    def _launch(self, port: int) -> bool:
        # Output goes to a file: a pipe nobody reads would block Azurite when it fills.
        self._log = tempfile.TemporaryFile(prefix="azurite-")  # noqa: SIM115 (closed in stop)
        self._process = subprocess.Popen(
            self.command(port),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.location or tempfile.gettempdir(),
            # Its own process group, so that stop() reaches node and anything it spawned;
            # and its end with ours, so that a SIGKILL of ours leaves no Azurite behind.
            start_new_session=True,
            preexec_fn=parentdeaths.die_with_parent,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection((self.host, port), 0.2):
                return True
            time.sleep(0.05)
        return False

    def _output_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:].decode(errors="replace")

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            self._signal(process, signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._signal(process, signal.SIGKILL)
                process.wait(STOP_TIMEOUT_S)
        elif process is not None:
            process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)

    def stop(self) -> None:
        self._terminate()
        self._port = self._requested_port

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
