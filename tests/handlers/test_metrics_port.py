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
    message = str(refused.value)
    assert f"127.0.0.1:{taken}" in message
    assert f"127.0.0.1:{taken}: address already in use: give --metrics-port" in message
    assert "--metrics-port" in message


async def test_a_free_port_is_served_and_its_number_said() -> None:
    options = running.Options(metrics_host="127.0.0.1", metrics_port=0)
    runner, port = await running._start_http(
        cast(registering.Operator, object()), asyncio.Event(), options, port=0
    )
    try:
        assert port > 0
    finally:
        await runner.cleanup()
