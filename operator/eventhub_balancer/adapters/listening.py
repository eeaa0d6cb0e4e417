"""What to change when a server of ours cannot listen: the port, or the address.

The pods' probes and metrics (``ehb consume --port``/``--host``) and the operator's metrics
(``ehb operator --metrics-port``/``--metrics-host``) say it in the same words, naming the
flag that moves it.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Flags:
    """The flags that set the address and the port, and where else each can be set."""

    host: str
    port: str
    #: how else each is set, said after the flag: "env EHB_HOST", "the chart's value `port`"
    host_also: str = ""
    port_also: str = ""


def refusal(host: str, port: int, error: OSError, *, flags: Flags) -> str:
    """One line naming the flag to change, for ``error`` from listening on ``host:port``."""
    where = f"{host}:{port}"
    if error.errno == errno.EADDRINUSE:
        return (
            f"{flags.port}: {where} is taken: give another {flags.port}"
            f"{_also(flags.port_also)}, or 0 for a free one"
        )
    reason = _reason(error)
    if error.errno == errno.EACCES:  # a port below 1024, without the privilege
        return (
            f"{flags.port}: cannot listen on {where} ({reason}): give a port from 1024 up"
            f"{_also(flags.port_also)}, or 0 for a free one"
        )
    return (
        f"{flags.host}: cannot listen on {where} ({reason}): give an address of this machine"
        f"{_also(flags.host_also)}, or 0.0.0.0 for all of them"
    )


def _reason(error: OSError) -> str:
    """The system's words for ``error``: asyncio rewrites a failed bind's ``strerror`` into
    "error while attempting to bind on address (...): ...", and a resolver's error has a
    negative ``errno`` that ``os.strerror`` does not know."""
    if error.errno is not None and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or str(error)


def _also(where: str) -> str:
    return f" ({where})" if where else ""
