"""One SparkSession for the whole test session (it takes about 5 s to start).

Tests marked ``spark`` skip, saying why, only when Java or pyspark is missing; ``make test``
checks for Java beforehand, so there they run.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest


def spark_unavailable() -> str | None:
    """Why Spark cannot run here, or None when it can."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'eventhub-balancer[spark]')"
    if shutil.which("java") is None:
        return "Java is not on PATH (Spark needs Java 17+)"
    return None


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    from eventhub_balancer.spark import sessions

    session = sessions.build_session(master="local[2]", app_name="ehb-tests")
    try:
        yield session
    finally:
        session.stop()
