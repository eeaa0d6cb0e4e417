"""`ehb spark archive FILE`: write a class-data archive that Spark drivers start from in half.

For a consumer image (a ``RUN`` step after the virtualenv is installed): the archive holds the
classes a local driver loads, and must be written with the Java and pyspark that will map it
(`spark.classarchives`). It prints what to give the drivers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eventhub_balancer.cli import flagtypes
from eventhub_balancer.spark import classarchives

COMMAND = ("spark", "archive")
HELP = "write a class-data archive of the Spark driver's JVM, for pods to start from"
#: The group's line in ``ehb --help`` (this is its only command).
GROUP_HELP = "build steps for the image of a Spark pipeline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        metavar="FILE",
        help="where to write the archive (about 180 MB), e.g. /opt/ehb/spark-classes.jsa",
    )
    parser.add_argument(
        "--timeout",
        type=flagtypes.number(float, positive=True),
        default=classarchives.DUMP_TIMEOUT_S,
        metavar="SECONDS",
        help="how long each of the two driver runs may take (default %(default).0f)",
    )


def run(args: argparse.Namespace) -> int:
    archive = Path(args.file).resolve()
    size = classarchives.dump(archive, timeout=args.timeout)
    print(f"wrote {archive} ({size / 1e6:.0f} MB): a driver maps it when its JVM is given")
    print(f"  SPARK_SUBMIT_OPTS='{classarchives.submit_options(archive)}'")
    return 0
