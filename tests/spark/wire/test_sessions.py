"""Sessions on a real cluster: local, a standalone master and worker, and Spark Connect.

Each session is built in a child process (``_probe``) that writes its result to a file: a
classic session is one per process (``getOrCreate`` would hand back the test session's local
one), and the child's stdout, which it never writes to, must stay empty: anything there is
Spark's. The query is a
trigger's: ``frames.to_dataframe`` from Arrow, then a count and a groupBy, over Connect too.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.spark import flags, sessions
from eventhub_balancer_devstack import sparkcluster
from tests.support import paths, sparkarchive
from tests.support.fixtures.spark import spark_unavailable

#: A child's session starts in 5-15 s on a loaded 2-core machine; bounded well above that.
CHILD_TIMEOUT_S = 150.0

EXPECTED = {
    "count": 15,
    "by_partition": {"0": [5, 4], "1": [3, 2], "2": [7, 6]},
    "batch_ids": [42],
    "minutes": 4,
    "schema_matches": True,
}

#: What the executors of the standalone cluster get: little memory, and a driver on loopback.
#: Both JVMs start light (C1 only, the serial collector), as the cluster's daemons do: a
#: JVM flag changes no result, and on a loaded 2-core machine the probe ran in 60-74 s
#: instead of 90-105 s.
CLUSTER_CONF = (
    "spark.executor.memory=512m",
    "spark.cores.max=2",
    "spark.driver.host=127.0.0.1",
    "spark.driver.bindAddress=127.0.0.1",
    "spark.driver.memory=512m",
    f"spark.driver.extraJavaOptions={sparkcluster.LIGHT_JVM_OPTIONS}",
    f"spark.executor.extraJavaOptions={sparkcluster.LIGHT_JVM_OPTIONS}",
)


def probe(
    *args: str, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """Run the probe; its result and its stderr. Its stdout must stay empty."""
    out = tmp_path / "probe.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.wire._probe", "--out", str(out), *args],
        cwd=paths.REPOSITORY,
        env=env if env is not None else sparkarchive.child_environment(os.environ),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "", f"Spark wrote to stdout: {done.stdout[:2000]!r}"
    return json.loads(out.read_text()), done.stderr


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- what the flags accept (no Spark needed) ---


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[1]",
        "local[*]",
        "local[4,2]",
        "spark://10.0.0.1:7077",
        "spark://a:7077,b:7077",
        "yarn",
        "k8s://https://kubernetes.default.svc:443",
    ],
)
def test_masters_that_pass(master: str) -> None:
    assert flags.validate_master(master) == master


@pytest.mark.parametrize(
    ("master", "says"),
    [
        ("", "is empty"),
        ("sc://host:15002", "--spark-remote"),
        ("local[0]", "local[N]"),
        ("local[two]", "local[N]"),
        ("spark://host", "spark://HOST:PORT"),
        ("spark://host:port", "spark://HOST:PORT"),
        ("spark-master:7077", "spark://spark-master:7077"),
        ("two words", "not a master URL"),
    ],
)
def test_masters_that_fail_say_what_to_write(master: str, says: str) -> None:
    with pytest.raises(errors.InvalidInput, match="--spark-master") as caught:
        flags.validate_master(master)
    assert says in str(caught.value)


def test_remote_urls_parse_with_the_default_port_and_hide_tokens() -> None:
    assert flags.parse_remote("sc://spark-connect") == (
        "spark-connect",
        15002,
        "sc://spark-connect",
    )
    address = flags.parse_remote("sc://h:443/;use_ssl=true;token=s3cret")
    assert (address.host, address.port) == ("h", 443)
    assert "s3cret" not in address.shown
    assert "use_ssl=true" in address.shown


@pytest.mark.parametrize(
    ("remote", "says"),
    [
        ("spark://h:7077", "--spark-master"),
        ("h:15002", "sc://HOST:PORT"),
        ("sc://", "names no host"),
        ("sc://h:port", "bad port"),
        ("sc://h:15002/path", "has a path"),
        ("http://h:15002/;token=s3cret", "sc://HOST:PORT"),
    ],
)
def test_malformed_remote_is_invalid_input(remote: str, says: str) -> None:
    with pytest.raises(errors.InvalidInput, match="--spark-remote") as caught:
        sessions.build_session(remote=remote)
    assert says in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_unreachable_connect_server_names_the_address() -> None:
    if spark_unavailable():
        pytest.skip(str(spark_unavailable()))
    port = closed_port()
    with pytest.raises(errors.ConfigurationError, match=f"127.0.0.1:{port}"):
        sessions.build_session(remote=f"sc://127.0.0.1:{port}", connect_timeout=1.0)


def test_unreachable_master_names_the_address() -> None:
    port = closed_port()
    with pytest.raises(errors.ConfigurationError, match=f"spark://127.0.0.1:{port}"):
        sessions.build_session(master=f"spark://127.0.0.1:{port}", connect_timeout=1.0)


# --- real sessions ---


def test_local_session_keeps_stdout_clean_and_logs_in_sparks_format(tmp_path: Path) -> None:
    if spark_unavailable():
        pytest.skip(str(spark_unavailable()))
    result, stderr = probe("--master", "local[1]", "--log-marker", "--lose", tmp_path=tmp_path)
    after = result.pop("after_loss")
    assert result == {**EXPECTED, "master": "local[1]", "version": result["version"]}
    # A killed JVM is seen as lost, and a new session starts in the same process and works.
    assert after == {**EXPECTED, "version": result["version"]}
    # Spark's own profile is loaded (not log4j's bare default, which prints to stdout)...
    assert "log4j2-defaults.properties" in stderr
    # ...so its warnings are on stderr in its format, and INFO is below its level.
    assert re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN probe: ehb-probe-warning$", stderr, re.M)
    assert "ehb-probe-info" not in stderr


def test_a_failed_write_logs_its_java_stacks_cut_to_their_first_lines(tmp_path: Path) -> None:
    """Live, a Spark sink that could not write logged about 220 lines per failed trigger, the
    whole Java stack four times over (the task's error, its loss, the job's abort), and a pod
    retries each failing partition with backoff: 2,700 of a pod's last 3,000 lines were Java
    frames. Every line Spark logs stays; of a stack, its exception and first frame."""
    if spark_unavailable():
        pytest.skip(str(spark_unavailable()))
    result, stderr = probe(
        "--master", "local[1]", "--fail-write", "/proc/ehb-no-such-dir", tmp_path=tmp_path
    )
    assert result["write_failed"] == "Py4JJavaError"
    failing = stderr.split("ehb-probe-failing-write", 1)[1]
    frames = [line for line in failing.splitlines() if line.lstrip().startswith("at ")]
    said = re.findall(r"^\d\d/\d\d/\d\d [\d:]+ (?:ERROR|WARN) (\w+): ", failing, re.M)
    assert {"Executor", "TaskSetManager"} <= set(said)  # every line Spark logs is still there
    assert 0 < len(frames) <= len(said)  # at most the first frame of each
    assert "Lost task 0.0" in failing
    assert "(stack cut)" in failing  # the stack TaskSetManager writes into its message
    assert "Caused by:" not in failing


def test_a_local_driver_maps_the_suites_class_archive(tmp_path: Path) -> None:
    """The suite's drivers start from the class archive that ``make install`` writes
    (`tests.support.sparkarchive`). With ``-Xshare:on`` a JVM that cannot map it does not
    start at all, so an archive left unused (another Java, other jars of Spark) fails here
    instead of only slowing the suite down."""
    if spark_unavailable():
        pytest.skip(str(spark_unavailable()))
    archive = sparkarchive.INSTALLED
    if not archive.is_file():
        pytest.fail(f"no class archive at {archive}: run `make install`, which writes it")
    env = {
        **sparkarchive.child_environment(os.environ),
        "SPARK_SUBMIT_OPTS": f"{sparkarchive.submit_options(archive)} -Xshare:on",
    }
    result, _ = probe("--master", "local[1]", tmp_path=tmp_path, env=env)
    assert result == {**EXPECTED, "master": "local[1]", "version": result["version"]}


def test_session_on_a_standalone_master(spark_master_url: str, tmp_path: Path) -> None:
    conf = [a for c in CLUSTER_CONF for a in ("--conf", c)]
    result, _ = probe("--master", spark_master_url, *conf, tmp_path=tmp_path)
    assert result == {**EXPECTED, "master": spark_master_url, "version": result["version"]}


def test_session_through_spark_connect(spark_connect_url: str, tmp_path: Path) -> None:
    result, _ = probe("--remote", spark_connect_url, tmp_path=tmp_path)
    assert result == {**EXPECTED, "version": result["version"]}


def test_connect_session_in_this_process_applies_sql_settings(
    spark_connect_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Connect session needs no JVM here; runtime SQL settings apply, core ones cannot."""
    # The session marks this process as a Connect client; the test session's later classic
    # sessions must not inherit that.
    # (setenv first: a delenv of a variable that is not set records nothing to restore.)
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "")
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED")
    from pyspark.sql import functions as F

    session = sessions.build_session(
        remote=spark_connect_url,
        conf={"spark.sql.shuffle.partitions": "3", "spark.executor.memory": "2g"},
    )
    try:
        assert session.conf.get("spark.sql.shuffle.partitions") == "3"
        assert session.conf.get("spark.sql.session.timeZone") == "UTC"
        df = session.range(10).withColumn("odd", F.col("id") % 2)
        assert sorted(tuple(r) for r in df.groupBy("odd").count().collect()) == [(0, 5), (1, 5)]
    finally:
        session.stop()
    assert "--spark-conf spark.executor.memory was not applied" in caplog.text
