"""The local Spark cluster of the development stack: a start that fails says why.

That it serves is what the session and consumer tests show through the session fixtures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer_devstack import sparkcluster
from tests.support.fixtures.spark import spark_unavailable


def test_a_server_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    # Spark refuses a driver below 450 MB at once: an exit, reported with the log's tail.
    with (
        pytest.raises(errors.ConfigurationError, match="exited before") as caught,
        sparkcluster.connect_server(driver_memory="64m", log_dir=tmp_path, start_timeout=60),
    ):
        pytest.fail("the server started")
    assert "insufficient driver memory" in str(caught.value).lower()
    assert str(tmp_path / "connect.log") in str(caught.value)
