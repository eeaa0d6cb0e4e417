"""``ehb local spark-connect``: a Spark Connect server for ``--spark-remote`` on the local stack.

A consumer with ``spark.remote`` had no server to point at on the local stack but one started
by hand (spark-submit with the server's class and the settings for loopback).
"""

from __future__ import annotations

import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.fixtures.spark import spark_unavailable
from tests.support.ports import accepts

COMMAND = [sys.executable, "-m", "eventhub_balancer", "local", "spark-connect"]
#: A Connect server starts in 10-25 s on a loaded two-core machine.
START_S = 120.0
#: A client that counts five rows through the server, in a process of its own (no classic
#: session of this test process in its way).
CLIENT = (
    "import sys\n"
    "from pyspark.sql.connect.session import SparkSession\n"
    "spark = SparkSession.builder.remote(sys.argv[1]).create()\n"
    "print(spark.range(5).count())\n"
    "spark.stop()\n"
)


def first_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The process's first line on stdout, waited for at most ``timeout`` seconds."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no line within {timeout:g} s"
    return process.stdout.readline().strip()


def refused(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command run with ``argv``, which it refuses before any JVM starts."""
    return subprocess.run(
        [*COMMAND, *argv], capture_output=True, text=True, timeout=60, cwd=paths.REPOSITORY
    )


def test_the_server_serves_its_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    process = subprocess.Popen(
        [*COMMAND, "--port", "0", "--master", "local[1]", "--log-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=paths.REPOSITORY,
    )
    try:
        url = first_line(process, START_S)
        assert url.startswith("sc://127.0.0.1:")
        counted = subprocess.run(
            [sys.executable, "-c", CLIENT, url],
            capture_output=True,
            text=True,
            timeout=START_S,
            cwd=paths.REPOSITORY,
        )
        assert counted.stdout.strip() == "5", counted.stderr[-2000:]
        assert (tmp_path / "connect.log").is_file()
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 10
        while accepts(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not accepts(port), "the server's JVM outlived the command"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_a_taken_port_is_said_before_the_jvm_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = refused("--port", str(port))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"ehb: error: --port: 127.0.0.1:{port} is taken: choose another --port, or 0 for a free one"
    ]


def test_a_master_that_is_no_master_is_refused_with_what_to_give() -> None:
    done = refused("--master", "sc://127.0.0.1:15002")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "ehb: error: --master: 'sc://127.0.0.1:15002' is a Spark Connect URL, which this command "
        "serves: give where the server runs its jobs, local[N] or spark://HOST:PORT"
    ]
    done = refused("--master", "local[two]")
    assert done.returncode == 2
    assert done.stderr.startswith("ehb: error: --master: ")
