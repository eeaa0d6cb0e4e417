"""`ehb local eventhubs`: first line is the connection string; SIGTERM stops it; bad flags."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from azure.eventhub import EventHubProducerClient

WAIT_S = 30
EHB = [sys.executable, "-m", "eventhub_balancer"]


def test_runs_serves_and_stops() -> None:
    process = subprocess.Popen(
        [*EHB, "local", "eventhubs", "--port", "0", "--hub", "orders=3", "--hub", "audit=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        assert first.startswith("Endpoint=sb://127.0.0.1:")
        assert first.endswith(";UseDevelopmentEmulator=true")
        assert "EntityPath" not in first
        with EventHubProducerClient.from_connection_string(first, eventhub_name="orders") as p:
            assert p.get_partition_ids() == ["0", "1", "2"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT_S)


@pytest.mark.parametrize("value", ["orders", "orders=x", "orders=0", "=3"])
def test_bad_hub_flag_names_the_flag(value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "eventhub_balancer", "local", "eventhubs", "--hub", value],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert result.returncode == 2
    assert "--hub" in result.stderr
