"""Building the consumer's SparkSession: local by default, a cluster or Spark Connect by flag.

One session per consumer process, shared by every trigger (a session costs about 5 s to
start; a trigger costs 0.1-0.3 s). The defaults suit small micro-batches on a pod's few
cores: no UI (a port per pod for nothing), few shuffle partitions (the default 200 turns
every small aggregation into 200 tasks), Arrow for building DataFrames from Python, and a
short status history (a pod runs triggers for weeks).

Three ways to run, by flag:

- ``--spark-master local[N]`` (the default ``local[2]``): the driver and its executors in
  this pod's JVM, listening on loopback only.
- ``--spark-master spark://host:port`` (or ``yarn``, ``k8s://...``): the driver in this pod's
  JVM, the executors on the cluster.
- ``--spark-remote sc://host:port``: a Spark Connect client, no JVM in this process at all.
  The server owns the driver, so its settings (memory, master, UI, ...) are the server's;
  only runtime SQL settings can be set from here, with ``session.conf.set``.

The flags are checked in ``spark.flags``, before anything starts.

Spark's own logs stay Spark's: its log4j2 defaults profile (loaded because nothing here
configures log4j) writes WARN and above to stderr in Spark's format, its Java stack traces cut
to their first lines once the session runs (`javalogs`), and the JVM is started with our
stderr as its stdout, so that stdout carries only what the process itself prints.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

from eventhub_balancer import errors
from eventhub_balancer.spark import flags, javalogs

logger = logging.getLogger(__name__)

#: Two local cores: a pod usually has a couple; Spark's work per micro-batch is small.
DEFAULT_MASTER: Final = "local[2]"

#: How long a Spark Connect server or a standalone master may take to accept a connection
#: (it may be starting beside the pod).
CONNECT_TIMEOUT_S: Final = 30.0

#: How a Spark Connect client retries a call its server does not answer (UNAVAILABLE: the
#: server killed, restarting, or accepting connections it never serves). pyspark's default
#: retries for at least 10 minutes, so a trigger in flight when the server went away, the
#: liveness check and the session's start all blocked that long, the pod Ready meanwhile.
#: Here 6 retries, 50 ms growing 4 times to 5 s at most: about 15 s in all (plus up to
#: 0.5 s of jitter a wait), which rides through a blip and fails the trigger after that,
#: so that the session is found lost and replaced (`consumer.sessionkeeping`).
CONNECT_RETRY_POLICY: Final[Mapping[str, Any]] = {
    "max_retries": 6,
    "initial_backoff": 50,
    "backoff_multiplier": 4.0,
    "max_backoff": 5000,
}

#: Settings every session gets unless the user overrides them with ``--spark-conf``. No log4j
#: option here: a ``-Dlog4j2.level`` stops Spark from loading its defaults profile, and the
#: JVM's bare default configuration then prints warnings to stdout. Spark's profile already
#: sets WARN for a driver started through spark-submit, as pyspark's is.
DEFAULT_CONF: Final[Mapping[str, str]] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Micro-batches are small: a handful of shuffle partitions, not the default 200.
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Without it a conversion problem silently falls back to the slow path; we want to know.
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # The driver keeps the status of past jobs, stages, tasks and SQL executions for its UI
    # and status API, with or without the UI: by default up to 1,000 jobs, 1,000 stages,
    # 100,000 tasks and 1,000 executions, kept on the heap for the life of a pod that runs
    # a trigger or more a second. Nothing in a consumer pod reads past triggers' status, so
    # a few are kept.
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "500",
    "spark.sql.ui.retainedExecutions": "50",
}

#: What a Spark Connect session gets of ``DEFAULT_CONF``: the runtime SQL settings. The rest
#: is the server's (UI, parallelism) or has no meaning there (Connect always uses Arrow).
CONNECT_CONF: Final[Mapping[str, str]] = {
    "spark.sql.shuffle.partitions": DEFAULT_CONF["spark.sql.shuffle.partitions"],
    "spark.sql.session.timeZone": DEFAULT_CONF["spark.sql.session.timeZone"],
}

#: A local driver's JVM compiles with C1 only. It runs the executors too, on the pod's few
#: cores beside the receivers, and HotSpot's optimizing compiler (C2) keeps compiling Spark's
#: per-job code for minutes. Measured on the 2-core development machine with triggers of
#: 4,000 events: with C2, 120-240 ms of compiler CPU per trigger over the first 30 triggers
#: and still 40-50 ms after 160, the JVM 270-430 ms of CPU a trigger, then 120-150; with C1
#: only, 90-160 ms from the start, and triggers 30-40% shorter while the receivers ran. A
#: handler whose own code loops long (heavy transformations on big triggers) runs slower under
#: C1: ``--spark-conf spark.driver.extraJavaOptions=`` (empty, or options of your own)
#: replaces this and gives C2 back.
LOCAL_JAVA_OPTIONS: Final = "-XX:TieredStopAtLevel=1"

#: Added for local masters only: the driver listens on loopback, and compiles with C1 only.
LOCAL_CONF: Final[Mapping[str, str]] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": LOCAL_JAVA_OPTIONS,
}


@contextlib.contextmanager
def _jvm_output_to_stderr() -> Iterator[None]:
    """Start the JVM (and the Python workers it forks) with our stderr as its stdout.

    The JVM inherits file descriptor 1, and anything Java prints to System.out would land
    there (log4j's bare default configuration does, when Spark's profile is not loaded): that
    broke ``--json`` output, which must be exactly one JSON document on stdout. Python's own
    stdout is back on fd 1 once the JVM runs.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _wait_reachable(what: str, addresses: list[tuple[str, int]], timeout: float) -> None:
    """Wait until one address accepts a TCP connection; else say which failed, and why."""
    deadline = time.monotonic() + timeout
    while True:
        failures = []
        for host, port in addresses:
            try:
                with socket.create_connection((host, port), timeout=2.0):
                    return
            except OSError as e:
                failures.append(f"{host}:{port}: {e}")
        if time.monotonic() >= deadline:
            raise errors.ConfigurationError(
                f"cannot reach the {what} within {timeout:.0f} s ({'; '.join(failures)}); "
                "check that it runs and that this pod may connect to it"
            )
        time.sleep(0.5)


def _connect_session(remote: str, *, conf: Mapping[str, str], timeout: float) -> Any:
    """A Spark Connect session: the driver is the server's; settings go through conf.set."""
    address = flags.parse_remote(remote)
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError as e:
        raise errors.ConfigurationError(
            "--spark-remote needs the Spark Connect client: pip install "
            "'eventhub-balancer[spark-connect]' (pyspark-client, no Java needed); "
            f"{_first_line(e)}"
        ) from e
    _wait_reachable(
        f"Spark Connect server at {address.host}:{address.port} (--spark-remote {address.shown})",
        [(address.host, address.port)],
        timeout,
    )
    logger.info("opening a Spark Connect session on %s", address.shown)
    # With the classic pyspark installed, pyspark.sql.functions and friends pick their Connect
    # implementation by this variable (pyspark's own builder sets it the same way, for good):
    # this process is a Spark Connect client from now on.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        # create(), not getOrCreate(): a session per call, on the server this URL names.
        session = ConnectSession.builder.remote(remote).create()
        _bound_retries(session)
        version = session.version
    except Exception as e:
        raise errors.ConfigurationError(
            f"the Spark Connect server at {address.host}:{address.port} "
            f"(--spark-remote {address.shown}) did not open a session: {_first_line(e)}"
        ) from e
    logger.info("Spark Connect session open (server Spark %s)", version)
    _apply_connect_conf(session, {**CONNECT_CONF, **conf}, user=conf)
    return session


def _bound_retries(session: Any) -> None:
    """Give ``session``'s client `CONNECT_RETRY_POLICY` instead of pyspark's 10 minutes."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    session.client.set_retry_policies([DefaultPolicy(**CONNECT_RETRY_POLICY)])


def _apply_connect_conf(
    session: Any, settings: Mapping[str, str], *, user: Mapping[str, str]
) -> None:
    """Set what a Connect session can set at run time; say what it could not.

    The server's SparkContext exists already: core settings (``spark.executor.*``,
    ``spark.driver.*``, ``spark.ui.*``...) and static SQL settings belong on the server's
    command line. A default that cannot apply is skipped quietly; a ``--spark-conf`` that
    cannot apply is a warning naming it, since the user asked for it.
    """
    for key, value in settings.items():
        try:
            session.conf.set(key, value)
        except Exception as e:
            if key in user:
                logger.warning(
                    "--spark-conf %s was not applied: a Spark Connect session cannot change "
                    "it (set it on the Connect server): %s",
                    key,
                    _first_line(e),
                )
            else:
                logger.debug("default %s not applied over Spark Connect: %s", key, e)


def build_session(
    *,
    master: str = DEFAULT_MASTER,
    remote: str | None = None,
    app_name: str = "eventhub-balancer",
    conf: Mapping[str, str] = {},
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> Any:
    """A SparkSession: classic on ``master``, or a Spark Connect one when ``remote`` is given.

    A classic session is ``getOrCreate``'s: an existing one in this process is reused. Python
    workers must run the interpreter that runs us (pyspark and pandas are installed there),
    hence PYSPARK_PYTHON; an explicit environment setting wins. A Connect session is a new
    one on the server (``app_name`` is the server's own there). A ``spark://`` master or a
    Connect server gets ``connect_timeout`` seconds to accept a TCP connection.
    """
    if remote is not None and remote.strip():
        if master != DEFAULT_MASTER:
            logger.warning(
                "--spark-master %s is ignored with --spark-remote: the Connect server's "
                "master applies",
                master,
            )
        return _connect_session(remote, conf=conf, timeout=connect_timeout)
    master = flags.validate_master(master)
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise errors.ConfigurationError(
            "Spark mode needs pyspark: pip install 'eventhub-balancer[spark]' (and Java 17+)"
        ) from e
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(DEFAULT_CONF)
    if master.startswith("local"):
        # A local driver has no business on the pod's network interfaces.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update(LOCAL_CONF)
    for key, value in {**settings, **conf}.items():
        builder = builder.config(key, value)
    if master.startswith("spark://"):
        # A driver whose master is unreachable starts anyway, and gives up a minute later.
        _wait_reachable(
            f"Spark master {master} (--spark-master)", _masters(master), connect_timeout
        )
    logger.info("starting a SparkSession on %s", master)
    try:
        with _jvm_output_to_stderr():
            session = builder.getOrCreate()
    except Exception as e:  # Java missing or the master unreachable: say which
        raise errors.ConfigurationError(
            f"cannot start a SparkSession on {master!r}: {type(e).__name__}: "
            f"{_first_line(e)} (Spark needs Java 17+ on PATH or JAVA_HOME)"
        ) from e
    # Spark's profile sets WARN already; this also holds under a log4j2 file of the user's.
    session.sparkContext.setLogLevel("WARN")
    javalogs.shorten(session)  # a failed trigger's Java stacks, cut to their first lines
    return session


def _masters(master: str) -> list[tuple[str, int]]:
    """The host:port pairs of a (validated) ``spark://a:7077[,b:7077]`` URL."""
    pairs = []
    for item in master.removeprefix("spark://").split(","):
        host, _, port = item.rpartition(":")
        pairs.append((host, int(port)))
    return pairs


def _is_connect(session: Any) -> bool:
    return type(session).__module__.startswith("pyspark.sql.connect")


def is_alive(session: Any) -> bool:
    """Whether ``session`` still answers: its JVM (or Spark Connect server) is there and it
    was not stopped, and a classic session on a cluster has an executor to run a job on. A
    few short calls, no job; asked after a trigger failed, and every few seconds
    (`consumer.sessionkeeping.WATCH_S`).

    A standalone master that restarts kills the executors of the applications it finds on
    its workers and does not know them: their driver answers, but every job waits for good.
    Without dynamic allocation (which lets executors go when idle), a cluster session with no
    executor is lost: a new one registers with the master as it is now."""
    try:
        if _is_connect(session):
            # A round trip to the server: ``session.version`` is cached by pyspark after its
            # first call (the build's), so it answered True with the server gone.
            return not session.is_stopped and bool(session.conf.get("spark.sql.session.timeZone"))
        context = session.sparkContext
        jsc = context._jsc
        if jsc is None:
            return False
        sc = jsc.sc()
        if sc.isStopped():
            return False
        if sc.isLocal() or sc.conf().getBoolean("spark.dynamicAllocation.enabled", False):
            return True
        # The driver is one of these; executors are the others.
        return len(sc.statusTracker().getExecutorInfos()) > 1
    except Exception as e:  # the gateway's socket is gone: so is the JVM
        logger.debug("the SparkSession does not answer: %s", _first_line(e))
        return False


def discard(session: Any) -> None:
    """Let go of a lost session, so that `build_session` starts a new one: stopped if it
    still can be, and for a classic session the dead JVM's gateway forgotten (pyspark keeps
    it for the process, and would hand the next session the same dead socket)."""
    if _is_connect(session):
        # Its server is gone or hung: releasing the session on it would be retried, and a
        # server that accepts calls and never answers holds the release for minutes (its
        # deadline is pyspark's): the disposal's bound (`sessionkeeping.DISCARD_TIMEOUT_S`)
        # would stop the pod instead of replacing the session. So the channel is closed
        # first, which also fails at once a trigger still waiting on the server; ``stop()``
        # then only forgets the session (its release fails on the closed channel). The
        # server lets an unreleased session go when it expires.
        with contextlib.suppress(Exception):
            session.client.set_retry_policies([])
        with contextlib.suppress(Exception):
            session.client._channel.close()
        with contextlib.suppress(Exception):
            session.stop()
        return
    with contextlib.suppress(Exception):
        session.stop()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
