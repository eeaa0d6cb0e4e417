"""A class-data archive of the local Spark driver's JVM, so that the suite's JVMs start in half.

Every local SparkSession the suite starts (the session fixture, each ``ehb consume --spark``
child, the benchmarks and probes) is a JVM that loads about 19,000 classes (Spark's, its
libraries' and Java's) before its first query answers. HotSpot can keep those classes, parsed
and verified, in an archive that later JVMs map (dynamic class-data sharing, Java 13 and
later). Measured on the 2-core development machine, a local session's start and first small
query:

- with the product's options: 20.3 s of JVM CPU, 10.8 s to the session, without the archive;
  9.7 s and 5.4 s with it;
- with the tests' light driver (`fixtures.spark.SMALL_DRIVER_ARGS`): 19-20 s and 12.7 s
  without, 10.3-10.6 s and 6.6-7.2 s with.

``python -m tests.support.sparkarchive FILE`` (``make install`` runs it) starts one local
session with the product's defaults, runs what a trigger runs (a DataFrame of received
events, aggregations, a Parquet write and read), and stops it: the JVM writes the classes it
loaded to FILE as it exits. A second driver then runs the same from the archive with
``-Xshare:on`` (a JVM that cannot map it fails to start) before FILE takes its name: a JVM
can crash on a damaged archive (one cut short) where it starts without a mismatched one.
`submit_options` is what a JVM is given to map it: the suite sets
it as ``SPARK_SUBMIT_OPTS`` (tests/conftest.py), which pyspark's launcher gives every driver
it starts, in the test processes and in the processes they start.

An archive that a JVM cannot use (another Java build, another set of Spark's jars) is left
unused: the JVM starts as without it, and says nothing (its class-data messages are off).
Only the time changes, and ``tests/spark/wire/test_sessions.py`` says so: one of its drivers
must map it. ``rm FILE`` and ``make install`` write it anew.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

#: Where ``make install`` writes the archive: in the venv, beside the pyspark it was made of.
FILE_NAME = "spark-classes.jsa"
INSTALLED = Path(sys.prefix) / FILE_NAME
#: How long each of the two runs may take: a session's start, the queries and (the first run)
#: the JVM's dump of 180 MB. Both took 72 s in all on the development machine.
DUMP_TIMEOUT_S = 300.0
#: HotSpot's class-data messages off: a warning would go to the JVM's stdout, which the
#: product sends to stderr, into the logs the tests read.
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def submit_options(archive: Path) -> str:
    """The JVM options that map ``archive``, quietly."""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the Spark settings of this process's own session (a Connect
    session's ``SPARK_REMOTE``, say): a child starts a session of its own. The archive's
    options stay, so that the child's driver maps it too."""
    return {
        k: v for k, v in environ.items() if not k.startswith("SPARK_") or k == "SPARK_SUBMIT_OPTS"
    }


def _workload(folder: Path) -> None:
    """What a trigger runs, in this process's session: it loads the classes to archive."""
    from pyspark.sql import functions as F

    from eventhub_balancer.spark import frames, sessions
    from tests.spark.wire import _probe

    session = sessions.build_session(master=sessions.DEFAULT_MASTER)
    try:
        _probe.run(session)
        events, ranges = _probe.trigger()
        df = frames.to_dataframe(session, events, batch_id=1, ranges=ranges)
        table = str(folder / "table")
        df.write.mode("append").partitionBy("partition").parquet(table)
        read = session.read.parquet(table)
        read.groupBy("partition").agg(F.max("sequence_number")).collect()
        read.join(df, ["partition", "sequence_number"]).count()
    finally:
        session.stop()
    # The JVM ends when its stdin closes (pyspark's gateway watches it), and writes the
    # archive as it exits: wait for that here, so that the file is whole once this returns.
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None and gateway.proc is not None:
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=DUMP_TIMEOUT_S)


def _run_workload(folder: str, submit_opts: str) -> None:
    """The workload in a child process whose driver JVM gets ``submit_opts``."""
    subprocess.run(
        [sys.executable, "-m", "tests.support.sparkarchive", "--workload", folder],
        env={**os.environ, "SPARK_SUBMIT_OPTS": submit_opts},
        check=True,
        timeout=DUMP_TIMEOUT_S,
    )


def dump(archive: Path) -> None:
    """Write the archive: a child process runs the workload in a JVM started with
    ``-XX:ArchiveClassesAtExit``, which writes the archive as it exits; a second one runs it
    again from the archive, which must map (``-Xshare:on``), before the archive is renamed
    into place."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="ehb-spark-archive-") as folder:
        _run_workload(folder, f"-XX:ArchiveClassesAtExit={partial} {QUIET}")
        if not partial.exists():
            raise SystemExit(f"the JVM wrote no class-data archive to {partial}")
        # A JVM that maps a damaged archive (cut short by a full disk, say) can crash instead
        # of starting without it: one driver must start from it before it takes its name.
        check = f"{submit_options(partial)} -Xshare:on -XX:ErrorFile={folder}/hs_err_%p.log"
        try:
            _run_workload(folder, check)
        except subprocess.CalledProcessError:
            partial.unlink(missing_ok=True)
            raise SystemExit(
                f"a Spark driver could not start from the class-data archive it wrote to "
                f"{partial} (removed): the output above says why"
            ) from None
    partial.replace(archive)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--workload":
        _workload(Path(argv[1]))
        return 0
    if len(argv) != 1:
        print("usage: python -m tests.support.sparkarchive FILE", file=sys.stderr)
        return 2
    dump(Path(argv[0]).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
