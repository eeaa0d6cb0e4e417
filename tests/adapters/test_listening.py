"""`listening.refusal`: a server that cannot listen names the flag that moves it, in words
that fit why: the port taken, the port privileged, or the address not this machine's."""

from __future__ import annotations

import errno
import socket

import pytest

from eventhub_balancer.adapters import listening

FLAGS = listening.Flags(host="--metrics-host", port="--metrics-port", port_also="chart: port")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        pytest.param(
            OSError(errno.EADDRINUSE, "Address already in use"),
            "--metrics-port: 0.0.0.0:80 is taken: give another --metrics-port (chart: port), "
            "or 0 for a free one",
            id="taken",
        ),
        pytest.param(
            OSError(errno.EACCES, "Permission denied"),
            "--metrics-port: cannot listen on 0.0.0.0:80 (Permission denied): give a port from "
            "1024 up (chart: port), or 0 for a free one",
            id="privileged",
        ),
        pytest.param(
            OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"),
            "--metrics-host: cannot listen on 0.0.0.0:80 (Cannot assign requested address): "
            "give an address of this machine, or 0.0.0.0 for all of them",
            id="not-this-machine",
        ),
        # asyncio rewrites a failed bind's words; the system's are said.
        pytest.param(
            OSError(
                errno.EADDRNOTAVAIL,
                "error while attempting to bind on address ('192.0.2.1', 80): cannot assign "
                "requested address",
            ),
            "--metrics-host: cannot listen on 0.0.0.0:80 (Cannot assign requested address): "
            "give an address of this machine, or 0.0.0.0 for all of them",
            id="asyncio-words",
        ),
        # The resolver's errors are negative: os.strerror(-2) is "Unknown error -2", which the
        # operator said, followed by advice about the port.
        pytest.param(
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "--metrics-host: cannot listen on 0.0.0.0:80 (Name or service not known): give an "
            "address of this machine, or 0.0.0.0 for all of them",
            id="unknown-name",
        ),
    ],
)
def test_a_refusal_to_listen_names_the_flag_that_mends_it(error: OSError, message: str) -> None:
    assert listening.refusal("0.0.0.0", 80, error, flags=FLAGS) == message
