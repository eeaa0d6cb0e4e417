"""`ehb local send`: the walkthrough's hub gets events to process, spread or to one partition.

Run in-process (`cli.main`) against the session's emulator, as a user runs it beside
``ehb local up``; what arrived is read back with the SDK.
"""

from __future__ import annotations

import asyncio
import io

import pytest

from eventhub_balancer import cli
from tests.support import eventhubclients as clients
from tests.support.fixtures.eventhubs import EventHubTarget


def counts(target: EventHubTarget) -> dict[str, int]:
    return {
        p: target.emulator.partition_info(target.name, p).retained_events
        for p in target.emulator.partition_ids(target.name)
    }


def send(target: EventHubTarget, *args: str) -> int:
    return cli.main(["local", "send", target.name, "--port", str(target.emulator.port), *args])


async def send_beside(target: EventHubTarget, *args: str) -> int:
    """`send` from a test that runs a loop: the command runs one of its own, as in a shell."""
    return await asyncio.to_thread(send, target, *args)


async def test_a_numbered_body_is_spread_evenly_in_order(
    eventhubs_hub: EventHubTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    body = '{"id": "o-{n}", "amount": 2.5}'
    assert await send_beside(eventhubs_hub, "--body", body, "--count", "10") == 0
    assert capsys.readouterr().out == (
        f"sent 10 events to hub {eventhubs_hub.name!r}, partitions 0-3\n"
    )
    assert counts(eventhubs_hub) == {"0": 3, "1": 3, "2": 2, "3": 2}
    got = await clients.receive(eventhubs_hub.connection_string, partition_id="1", count=3)
    assert [e.body_as_str() for e in got] == [
        '{"id": "o-2", "amount": 2.5}',
        '{"id": "o-6", "amount": 2.5}',
        '{"id": "o-10", "amount": 2.5}',
    ]


async def test_stdins_lines_go_to_one_partition(
    eventhubs_hub: EventHubTarget,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("first\n\nsecond\r\nthird"))
    assert await send_beside(eventhubs_hub, "--partition", "2") == 0
    assert capsys.readouterr().out.endswith("partitions 2\n")
    assert counts(eventhubs_hub) == {"0": 0, "1": 0, "2": 3, "3": 0}
    got = await clients.receive(eventhubs_hub.connection_string, partition_id="2", count=3)
    assert [e.body_as_str() for e in got] == ["first", "second", "third"]


def test_what_cannot_be_sent_says_what_to_change(
    eventhubs_hub: EventHubTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    assert send(eventhubs_hub, "--partition", "9", "--body", "x") == 2
    assert f"--partition: hub {eventhubs_hub.name!r} has no partition '9' (it has 0-3)" in (
        capsys.readouterr().err
    )
    port = str(eventhubs_hub.emulator.port)
    assert cli.main(["local", "send", "no-such-hub", "--port", port, "--body", "x"]) == 2
    assert "has no hub 'no-such-hub': give one it has" in capsys.readouterr().err
    assert counts(eventhubs_hub) == {"0": 0, "1": 0, "2": 0, "3": 0}


def test_no_emulator_on_the_port_is_said_with_how_to_start_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert cli.main(["local", "send", "orders", "--port", str(port), "--body", "x"]) == 1
    err = capsys.readouterr().err
    assert f"no Event Hubs emulator answers on 127.0.0.1:{port}" in err
    assert "start one with ehb local up" in err
