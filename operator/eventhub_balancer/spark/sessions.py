"""Building the consumer's SparkSession: local by default, any master by configuration.

One session per consumer process, shared by every partition's batches (a session costs about
5 s to start; a batch costs 0.1-0.3 s). The defaults suit small micro-batches on a pod's few
cores: no UI (a port per pod for nothing), few shuffle partitions (the default 200 turns
every small aggregation into 200 tasks), and Arrow for building DataFrames from Python.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Final

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

#: Two local cores: a pod usually has a couple; Spark's work per micro-batch is small.
DEFAULT_MASTER: Final = "local[2]"

#: Settings every session gets unless the user overrides them with ``--spark-conf``.
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
    # A consumer pod is not an interactive shell: keep the driver's own logs quiet.
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=WARN",
}

#: Added for local masters only: the driver listens on loopback.
LOCAL_CONF: Final[Mapping[str, str]] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``--spark-conf key=value`` flags as a mapping; a malformed one names itself."""
    conf: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise errors.InvalidInput("--spark-conf", f"{pair!r} is not key=value")
        conf[key.strip()] = value.strip()
    return conf


@contextlib.contextmanager
def _jvm_output_to_stderr() -> Iterator[None]:
    """Start the JVM (and the Python workers it forks) with our stderr as its stdout.

    The JVM inherits file descriptor 1, and log4j prints there before any configuration
    applies (the native-hadoop warning): that broke ``--json`` output, which must be exactly
    one JSON document on stdout. Python's own stdout is back on fd 1 once the JVM runs.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def build_session(
    *,
    master: str = DEFAULT_MASTER,
    app_name: str = "eventhub-balancer",
    conf: Mapping[str, str] = {},
) -> Any:
    """A SparkSession (``getOrCreate``: an existing one in this process is reused).

    Python workers must run the interpreter that runs us (pyspark and pandas are installed
    there), hence PYSPARK_PYTHON; an explicit environment setting wins.
    """
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
    logger.info("starting a SparkSession on %s", master)
    try:
        with _jvm_output_to_stderr():
            session = builder.getOrCreate()
    except Exception as e:  # Java missing or the master unreachable: say which
        raise errors.ConfigurationError(
            f"cannot start a SparkSession on {master!r}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''} "
            "(Spark needs Java 17+ on PATH or JAVA_HOME)"
        ) from e
    session.sparkContext.setLogLevel("WARN")
    return session
