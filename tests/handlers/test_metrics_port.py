"""`running`: a metrics port that cannot be had is one line naming the flag, not a stack."""

from __future__ import annotations

import asyncio
import socket
from typing import cast

import pytest

from eventhub_balancer import errors
from eventhub_balancer.handlers import registering, running


async def test_a_port_another_process_holds_names_the_flag_that_moves_it() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        options = running.Options(metrics_host="127.0.0.1", metrics_port=taken)
        with pytest.raises(errors.ConfigurationError) as refused:
            await running._start_http(
                cast(registering.Operator, object()), asyncio.Event(), options, port=taken
            )
    assert str(refused.value) == (
        f"--metrics-port: 127.0.0.1:{taken} is taken: give another --metrics-port (the "
        "chart's value `port`), or 0 for a free one"
    )


async def test_an_address_not_of_this_machine_names_the_host_flag() -> None:
    """It said "unknown error" or "cannot assign requested address", then advised another
    port: the address is what is wrong. 192.0.2.1 is for documentation, on no machine."""
    options = running.Options(metrics_host="192.0.2.1", metrics_port=0)
    with pytest.raises(errors.ConfigurationError) as refused:
        await running._start_http(
            cast(registering.Operator, object()), asyncio.Event(), options, port=0
        )
    assert str(refused.value) == (
        "--metrics-host: cannot listen on 192.0.2.1:0 (Cannot assign requested address): give "
        "an address of this machine, or 0.0.0.0 for all of them"
    )


async def test_a_free_port_is_served_and_its_number_said() -> None:
    options = running.Options(metrics_host="127.0.0.1", metrics_port=0)
    runner, port = await running._start_http(
        cast(registering.Operator, object()), asyncio.Event(), options, port=0
    )
    try:
        assert port > 0
    finally:
        await runner.cleanup()
