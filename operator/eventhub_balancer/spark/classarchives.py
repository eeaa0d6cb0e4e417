"""A class-data archive of the local Spark driver's JVM: a Spark pod's driver starts in half.

A local SparkSession's JVM loads about 19,000 classes (Spark's, its libraries' and Java's)
before its first query answers. HotSpot can keep those classes, parsed and verified, in an
archive that later JVMs map (dynamic class-data sharing, Java 13 and later). Measured on a
2-core machine, a session's start and first small query with the consumer's defaults took 20.3 s
of JVM CPU and 10.8 s to the session without the archive, 9.7 s and 5.4 s with it. A new pod
holds no partitions meanwhile, and an autoscaled one is started because the others lag.

`dump` (``ehb spark archive FILE``) starts one local session with the consumer's defaults,
runs what a trigger runs (`frames.warm_up`: Arrow, a DataFrame, a shuffle; then a Parquet write
and read and a join), and stops it: the JVM writes the classes it loaded to FILE as it exits.
A second driver then runs the same from the archive with ``-Xshare:on`` (a JVM that cannot map
it fails to start) before FILE takes its name: a JVM can crash on a damaged archive (one cut
short by a full disk) where it starts without a mismatched one. Each run is a child process:
a JVM takes its options when it starts, and this process may have started one already.

A driver maps the archive when its JVM is given `submit_options`, through ``SPARK_SUBMIT_OPTS``
(pyspark's launcher gives it to every driver it starts) or ``spark.driver.extraJavaOptions``.
An archive the JVM cannot use (another Java build, another set of Spark's jars) is left unused
without a word: the JVM starts as it would without it, only slower. So write the archive where
the driver runs, with the same Java and pyspark: in the image, by a ``RUN`` step after the
virtualenv is installed (docs/spark.md). Only a local driver (``local[N]``, or the driver of a
``spark://`` master) has a JVM in the pod; a Spark Connect client has none to start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from eventhub_balancer import errors

#: How long each of the two runs may take: a session's start, the queries, and (the first run)
#: the JVM's dump of about 180 MB. Both took 72 s in all on a 2-core machine.
DUMP_TIMEOUT_S: Final = 300.0
#: HotSpot's class-data messages off: a warning would go to the JVM's stdout, which the
#: consumer sends to stderr, into its logs, at every start.
QUIET: Final = "-Xlog:cds=off,cds+dynamic=off"
#: The settings that make pyspark's session a Spark Connect client, which starts no JVM.
CONNECT_SETTINGS: Final = frozenset(
    {"SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE"}
)
#: The child's argument that makes it run the workload instead of the command.
WORKLOAD_FLAG: Final = "--workload"


def submit_options(archive: Path) -> str:
    """The JVM options that map ``archive``, quietly (for ``SPARK_SUBMIT_OPTS``)."""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def dump(archive: Path, *, timeout: float = DUMP_TIMEOUT_S) -> int:
    """Write the archive to ``archive`` (replacing one there only once the new one maps);
    its size in bytes. Raises `errors.InvalidInput` for a path it cannot write and
    `errors.ConfigurationError` when no driver can start or map the archive."""
    archive = archive.resolve()
    _check_destination(archive)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise errors.ConfigurationError(
            "no Java runtime: a Spark driver needs Java 17+ on PATH or in JAVA_HOME"
        )
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="ehb-spark-archive-") as folder:
        _say(
            f"run 1 of 2: a Spark driver runs a trigger's work, archiving its classes to {partial}"
        )
        _run_workload(folder, f"-XX:ArchiveClassesAtExit={partial} {QUIET}", timeout=timeout)
        if not partial.exists():
            raise errors.ConfigurationError(
                f"the Spark driver's JVM wrote no class-data archive to {partial}: it needs "
                "Java's own class-data archive (lib/server/classes.jsa, which a JRE built "
                "without it lacks; `java -Xshare:dump` as root writes it)"
            )
        _say("run 2 of 2: a Spark driver must start from the archive")
        check = f"{submit_options(partial)} -Xshare:on -XX:ErrorFile={folder}/hs_err_%p.log"
        try:
            _run_workload(folder, check, timeout=timeout)
        except errors.ConfigurationError as e:
            partial.unlink(missing_ok=True)
            raise errors.ConfigurationError(
                f"a Spark driver could not start from the class-data archive just written "
                f"(removed): {e}"
            ) from None
    size = partial.stat().st_size
    partial.replace(archive)
    return size


def _say(progress: str) -> None:
    """A step of the two runs, on stderr (the drivers' own output goes there too)."""
    print(f"ehb spark archive: {progress}", file=sys.stderr, flush=True)


def _check_destination(archive: Path) -> None:
    if archive.is_dir():
        raise errors.InvalidInput("FILE", f"{archive} is a directory: name the archive's file")
    folder = archive.parent
    if not folder.is_dir():
        raise errors.InvalidInput("FILE", f"{folder} does not exist: create it first")
    if not os.access(folder, os.W_OK):
        raise errors.InvalidInput("FILE", f"{folder} is not writable: name a folder you can write")


def _run_workload(folder: str, submit_opts: str, *, timeout: float) -> None:
    """The workload in a child process whose driver JVM gets ``submit_opts`` (its output
    goes to this process's stderr). The child keeps this environment (``SPARK_HOME``, say:
    the drivers that map the archive must load the same jars), less what would make its
    session a Spark Connect one."""
    env = {k: v for k, v in os.environ.items() if k not in CONNECT_SETTINGS}
    env["SPARK_SUBMIT_OPTS"] = submit_opts
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, WORKLOAD_FLAG, folder],
            env=env,
            stdout=2,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise errors.ConfigurationError(
            f"the Spark driver's run did not end within {timeout:.0f} s"
        ) from None
    if done.returncode != 0:
        raise errors.ConfigurationError(
            f"the Spark driver's run failed (exit {done.returncode}): its output above says why"
        )


def workload(folder: Path) -> None:
    """What a consumer's driver runs, in this process's own session: it loads the classes to
    archive. The JVM writes the archive as it exits, which this waits for."""
    from pyspark.sql import functions as F

    from eventhub_balancer.spark import frames, sessions

    session = sessions.build_session(master=sessions.DEFAULT_MASTER)
    try:
        loader = frames.arrow_loader(session)
        frames.warm_up(session, rounds=2, loader=loader)
        frames.warm_up(session, rounds=1)
        events, ranges = frames.sample()
        df = frames.to_dataframe(session, events, batch_id=1, ranges=ranges, loader=loader)
        table = str(folder / "table")
        df.write.mode("append").partitionBy("partition").parquet(table)
        read = session.read.parquet(table)
        read.groupBy("partition").agg(F.max("sequence_number")).collect()
        read.join(df, ["partition", "sequence_number"]).count()
    finally:
        session.stop()
    # The JVM ends when its stdin closes (pyspark's gateway watches it), and writes the
    # archive as it exits: wait for that, so that the file is whole once this returns.
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None and gateway.proc is not None:
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=DUMP_TIMEOUT_S)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] != WORKLOAD_FLAG:
        print(f"usage: python -m {__name__} {WORKLOAD_FLAG} FOLDER", file=sys.stderr)
        return 2
    workload(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
