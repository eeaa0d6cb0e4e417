"""A real Spark cluster on 127.0.0.1, started from the pyspark distribution, for tests and
``ehb local spark-connect``.

pyspark's wheel is a Spark distribution: ``bin/spark-class`` starts the standalone Master and
Worker, and ``bin/spark-submit`` the Spark Connect server (``jars/spark-connect_*.jar``).
These context managers start them as child processes on free loopback ports, wait (bounded)
until they serve, and stop them (SIGTERM to their process group, then SIGKILL):
``with standalone_cluster() as cluster`` (``cluster.url``: ``spark://127.0.0.1:PORT``) and
``with connect_server() as server`` (``server.url``: ``sc://127.0.0.1:PORT``).

Nothing is daemonised (no ``sbin/start-*.sh``): the processes are ours (they end with us:
`parentdeaths`), their logs are files of ours, and a failed start says why with the tail of
the log. Memory: 256 MB per daemon, 1 GB offered by the worker, 768 MB for the Connect driver.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from eventhub_balancer import errors
from eventhub_balancer_devstack import parentdeaths
from eventhub_balancer_devstack.azurite import free_port

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"

#: A JVM daemon starts in 3-10 s; a loaded 2-core machine can take several times that.
START_TIMEOUT_S = 90.0
#: How long a SIGTERM may take before the process group gets SIGKILL.
STOP_TIMEOUT_S = 10.0
#: A port picked free can be taken before the JVM binds it: a few attempts at start.
BIND_ATTEMPTS = 3

#: Short-lived JVMs on a small machine: the C1 compiler only and the serial collector start
#: faster and take less memory than the server defaults.
LIGHT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: What a test's driver or executor needs to run Python on this cluster: this interpreter.
PYTHON_ENV = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    try:
        import pyspark
    except ImportError as e:
        raise errors.ConfigurationError(
            "a local Spark cluster needs pyspark: pip install 'eventhub-balancer[spark]'"
        ) from e
    return Path(pyspark.__file__).resolve().parent


def java_missing() -> str | None:
    """Why no JVM can start here, or None."""
    java_home = os.environ.get("JAVA_HOME")
    if (java_home and (Path(java_home) / "bin" / "java").exists()) or shutil.which("java"):
        return None
    return "Java is not on PATH nor in JAVA_HOME (Spark needs Java 17+)"


class SparkProcess:
    """One Spark JVM (``spark-class`` or ``spark-submit``) with its output in a log file."""

    def __init__(self, name: str, command: Sequence[str], *, log_dir: Path, env: Mapping[str, str]):
        self.name = name
        self.command = list(command)
        self.log_path = log_dir / f"{name}.log"
        self.env = dict(env)
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        logger.info("starting Spark %s: %s", self.name, " ".join(self.command))
        # Output goes to a file: a pipe nobody reads would block the JVM when it fills.
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self._process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.log_path.parent,
            # Its own group, for stop() to reach the JVM's forks (executors); its end with
            # ours (spark-class execs the JVM): a killed test run leaves no JVM behind.
            start_new_session=True,
            preexec_fn=parentdeaths.die_with_parent,
        )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-chars:].decode(errors="replace")
        except OSError:
            return ""

    def wait_until(self, ready: Callable[[], bool], *, what: str, timeout: float) -> None:
        """Poll ``ready`` until it holds; fail with the log's tail if it does not in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise errors.ConfigurationError(
                    f"Spark {self.name} exited before {what} "
                    f"(exit code {self._process.returncode if self._process else '?'}); "
                    f"its log {self.log_path} ends:\n{self.log_tail()}"
                )
            if ready():
                return
            time.sleep(0.25)
        raise errors.ConfigurationError(
            f"Spark {self.name}: no {what} within {timeout:.0f} s; "
            f"its log {self.log_path} ends:\n{self.log_tail()}"
        )

    def stop(self) -> None:
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
        if process is not None:
            # The JVM is gone; whatever it forked (executors, Python workers) goes too.
            self._signal(process, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)


def _environment(home: Path, extra: Mapping[str, str] = {}) -> dict[str, str]:
    env = {
        **os.environ,
        **PYTHON_ENV,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": HOST,
        # Daemons (Master, Worker) are small; their JVMs need not reserve the default 1 GB.
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": LIGHT_JVM_OPTIONS,
        **extra,
    }
    # A test process may carry these for its own session; the cluster must not inherit them.
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "MASTER"):
        env.pop(name, None)
    return env


@contextlib.contextmanager
def _log_directory(log_dir: Path | None) -> Iterator[Path]:
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        yield log_dir
        return
    with tempfile.TemporaryDirectory(prefix="ehb-spark-") as directory:
        yield Path(directory)


def _start_with_retries(
    make: Callable[[], tuple[SparkProcess, Callable[[], bool], str]], timeout: float
) -> SparkProcess:
    """Start a process on freshly picked ports; a bind race is retried with new ports."""
    last: errors.ConfigurationError | None = None
    for attempt in range(1, BIND_ATTEMPTS + 1):
        process, ready, what = make()
        process.start()
        try:
            process.wait_until(ready, what=what, timeout=timeout)
            return process
        except errors.ConfigurationError as e:
            process.stop()
            last = e
            if "BindException" not in process.log_tail(20_000):
                raise
            logger.info("Spark %s lost its port (attempt %d); retrying", process.name, attempt)
    assert last is not None
    raise last


@dataclasses.dataclass(frozen=True)
class StandaloneCluster:
    """A running standalone Master with its Worker."""

    url: str
    web_ui: str
    log_dir: Path

    def status(self) -> dict[str, object]:
        """The master's own view (``/json/``): workers, cores, running applications."""
        return _master_status(self.web_ui)


def _master_status(web_ui: str) -> dict[str, object]:
    with urllib.request.urlopen(f"{web_ui}/json/", timeout=2.0) as response:
        body = json.load(response)
    return dict(body) if isinstance(body, dict) else {}


def _alive_workers(web_ui: str) -> int:
    try:
        value = _master_status(web_ui).get("aliveworkers", 0)
    except (OSError, ValueError):
        return 0
    return int(value) if isinstance(value, int | str) else 0


@contextlib.contextmanager
def standalone_cluster(
    *,
    cores: int = 2,
    memory: str = "1g",
    log_dir: Path | None = None,
    start_timeout: float = START_TIMEOUT_S,
) -> Iterator[StandaloneCluster]:
    """A standalone Master and one Worker on 127.0.0.1; yields once the worker registered.

    Applications on it should ask for little (``spark.executor.memory=512m``) and bind their
    driver to loopback (``spark.driver.host=127.0.0.1``) so the executors reach it.
    """
    home = spark_home()
    spark_class = str(home / "bin" / "spark-class")
    with _log_directory(log_dir) as logs, contextlib.ExitStack() as stack:
        env = _environment(
            home,
            {
                # No REST submission server (another port), no event log.
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false",
                "SPARK_WORKER_DIR": str(logs / "work"),
            },
        )
        ports: dict[str, int] = {}

        def make_master() -> tuple[SparkProcess, Callable[[], bool], str]:
            ports["master"], ports["ui"] = free_port(HOST), free_port(HOST)
            process = SparkProcess(
                "master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    HOST,
                    "--port",
                    str(ports["master"]),
                    "--webui-port",
                    str(ports["ui"]),
                ],
                log_dir=logs,
                env=env,
            )
            web_ui = f"http://{HOST}:{ports['ui']}"
            return process, lambda: _serves_json(web_ui), "web UI answering"

        master = _start_with_retries(make_master, start_timeout)
        stack.callback(master.stop)
        url = f"spark://{HOST}:{ports['master']}"
        web_ui = f"http://{HOST}:{ports['ui']}"

        def make_worker() -> tuple[SparkProcess, Callable[[], bool], str]:
            process = SparkProcess(
                "worker",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    HOST,
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(free_port(HOST)),
                    "--work-dir",
                    str(logs / "work"),
                ],
                log_dir=logs,
                env=env,
            )
            return process, lambda: _alive_workers(web_ui) >= 1, "worker registered"

        worker = _start_with_retries(make_worker, start_timeout)
        # The worker stops first: its executors end with it, then the master.
        stack.callback(worker.stop)
        logger.info("Spark standalone master %s is up with 1 worker", url)
        yield StandaloneCluster(url=url, web_ui=web_ui, log_dir=logs)


def _serves_json(web_ui: str) -> bool:
    try:
        _master_status(web_ui)
    except (OSError, ValueError):
        return False
    return True


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), 0.5):
        return True
    return False


@dataclasses.dataclass(frozen=True)
class ConnectServer:
    """A running Spark Connect server."""

    url: str
    port: int
    log_dir: Path
    process: SparkProcess | None = dataclasses.field(default=None, compare=False, repr=False)


#: The Connect server's own settings: a small driver on loopback, no UI, few partitions.
CONNECT_SERVER_CONF: Mapping[str, str] = {
    "spark.driver.host": HOST,
    "spark.driver.bindAddress": HOST,
    "spark.connect.grpc.binding.address": HOST,
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.driver.extraJavaOptions": LIGHT_JVM_OPTIONS,
    "spark.sql.codegen.wholeStage": "false",
}


@contextlib.contextmanager
def connect_server(
    *,
    master: str = "local[2]",
    driver_memory: str = "768m",
    conf: Mapping[str, str] = {},
    log_dir: Path | None = None,
    start_timeout: float = START_TIMEOUT_S,
    port: int = 0,
) -> Iterator[ConnectServer]:
    """A Spark Connect server on 127.0.0.1:``port`` (0: a free one), once it accepts calls."""
    home = spark_home()
    with _log_directory(log_dir) as logs, contextlib.ExitStack() as stack:
        # spark-submit sizes the Connect server's JVM like a daemon's (SPARK_DAEMON_MEMORY),
        # not by --driver-memory.
        env = _environment(home, {"SPARK_DAEMON_MEMORY": driver_memory})
        ports: dict[str, int] = {}

        def make() -> tuple[SparkProcess, Callable[[], bool], str]:
            grpc = ports["grpc"] = port or free_port(HOST)
            settings = {
                **CONNECT_SERVER_CONF,
                "spark.connect.grpc.binding.port": str(grpc),
                # A taken port is a failure to report, not a reason to walk up to the next.
                "spark.connect.grpc.port.maxRetries": "0",
                "spark.local.dir": str(logs / "tmp"),
                **conf,
            }
            command = [
                str(home / "bin" / "spark-submit"),
                "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name",
                "ehb-spark-connect",
                "--master",
                master,
                "--driver-memory",
                driver_memory,
            ]
            for key, value in settings.items():
                command += ["--conf", f"{key}={value}"]
            process = SparkProcess("connect", command, log_dir=logs, env=env)
            return process, lambda: _accepts(grpc), f"connection on port {grpc}"

        (logs / "tmp").mkdir(exist_ok=True)
        server = _start_with_retries(make, start_timeout)
        stack.callback(server.stop)
        url = f"sc://{HOST}:{ports['grpc']}"
        logger.info("Spark Connect server is up at %s", url)
        yield ConnectServer(url=url, port=ports["grpc"], log_dir=logs, process=server)
