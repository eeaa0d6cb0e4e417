"""`ehb local eventhubs`: first line is the connection string; SIGTERM stops it; bad flags."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from typing import Any

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
        _, err = process.communicate(timeout=WAIT_S)
        assert process.returncode == 0, err
        # Said as the other local commands say it (`stopping`), then that the stop ended.
        assert err.splitlines()[-2:] == [
            "ehb: SIGTERM: stopping the Event Hubs emulator",
            "stopped",
        ], err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT_S)


@pytest.mark.parametrize("value", ["orders", "orders=x", "orders=0", "=3", "orders/eu=3", "-x=1"])
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


def test_a_consumer_group_the_operator_cannot_name_is_refused() -> None:
    """A group the operator refuses in a spec (`specvalues`) would be served here for nothing."""
    result = subprocess.run(
        [*EHB, "local", "eventhubs", "--port", "0", "--consumer-group", "analytics/eu"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert result.returncode == 2
    assert "argument --consumer-group: 'analytics/eu' is not a consumer group name" in (
        result.stderr
    )


def test_an_address_or_port_it_cannot_listen_on_names_the_flag_to_change() -> None:
    """An address not of this machine was said with "choose another --port"."""
    local = [*EHB, "local", "eventhubs"]
    elsewhere = subprocess.run(
        [*local, "--host", "192.0.2.1", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert elsewhere.returncode == 1
    assert elsewhere.stderr.splitlines() == [
        "ehb: error: --host: cannot listen on 192.0.2.1:0 (Cannot assign requested address): "
        "give an address of this machine, or 0.0.0.0 for all of them"
    ]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        held = subprocess.run(
            [*local, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
    assert held.returncode == 1
    assert held.stderr.splitlines() == [
        f"ehb: error: --port: 127.0.0.1:{port} is taken: give another --port, or 0 for a free one"
    ]


def test_a_signal_right_after_the_first_line_is_a_stop_with_status_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The emulator counted itself up only once it had printed everything: a Ctrl-C after its
    first line, which scripts wait for, ended in 130 (`tests/cli/test_exit_codes.py`, in CI)."""
    from eventhub_balancer_devstack.commands import local_eventhubs

    def first_line_then_a_signal(emulator: Any, *_: Any) -> None:
        print(emulator.connection_string(), flush=True)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(local_eventhubs, "_print_serving", first_line_then_a_signal)
    parser = argparse.ArgumentParser()
    local_eventhubs.add_arguments(parser)
    assert local_eventhubs.run(parser.parse_args(["--port", "0"])) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Endpoint=sb://127.0.0.1:")
    assert err.splitlines()[-2:] == ["ehb: SIGINT: stopping the Event Hubs emulator", "stopped"]
