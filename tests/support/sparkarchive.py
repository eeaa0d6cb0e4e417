"""The suite's class-data archive of the local Spark driver's JVM: its JVMs start in half.

Every local SparkSession the suite starts (the session fixture, each ``ehb consume --spark``
child, the benchmarks and probes) is a JVM that loads about 19,000 classes before its first
query answers. ``make install`` writes the archive of them with the product's own command,
``ehb spark archive .venv/spark-classes.jsa`` (`eventhub_balancer.spark.classarchives`), and
tests/conftest.py gives every driver `submit_options` as ``SPARK_SUBMIT_OPTS``, which
pyspark's launcher gives every driver it starts, in the test processes and in the processes
they start. Measured with the tests' light driver (`fixtures.spark.SMALL_DRIVER_ARGS`): 19-20 s
of JVM CPU and 12.7 s to the session without it, 10.3-10.6 s and 6.6-7.2 s with it.

An archive that a JVM cannot use (another Java build, another set of Spark's jars) is left
unused: only the time changes, and ``tests/spark/wire/test_sessions.py`` says so: one of its
drivers must map it. ``rm .venv/spark-classes.jsa`` and ``make install`` write it anew.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from eventhub_balancer.spark.classarchives import submit_options

__all__ = ["INSTALLED", "child_environment", "submit_options"]

#: Where ``make install`` writes the archive: in the venv, beside the pyspark it was made of.
INSTALLED = Path(sys.prefix) / "spark-classes.jsa"


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the Spark settings of this process's own session (a Connect
    session's ``SPARK_REMOTE``, say): a child starts a session of its own. The archive's
    options stay, so that the child's driver maps it too."""
    return {
        k: v for k, v in environ.items() if not k.startswith("SPARK_") or k == "SPARK_SUBMIT_OPTS"
    }
