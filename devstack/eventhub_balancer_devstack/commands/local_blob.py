"""``ehb local blob``: run Azurite (the local Blob Storage) until interrupted.

The demo, the consumer and ``ehb checkpoints list`` need a blob endpoint; this prints its
connection string first (so scripts can read one line) and stops Azurite on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eventhub_balancer.cli import flagtypes
from eventhub_balancer_devstack.commands import stopping

if TYPE_CHECKING:
    from eventhub_balancer_devstack import azurite

COMMAND = ("local", "blob")
HELP = "run Azurite (local Blob Storage) on 127.0.0.1 and print its connection string"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=flagtypes.port(), default=0, help="the blob port (default: a free one)"
    )
    parser.add_argument(
        "--location",
        type=Path,
        default=None,
        help="keep blobs in this directory across restarts (default: in memory)",
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack import azurite
    from eventhub_balancer_devstack.commands import demo

    # A file given here was said as a port taken: Azurite's folder is made before its port.
    demo.check_directory(args.location, flag="--location")
    service = azurite.Azurite(port=args.port, location=args.location)
    # The stop comes first: a Ctrl-C while Azurite starts stops it.
    with stopping.stopping_cleanly("Azurite"):
        try:
            return _serve(service, args.port)
        finally:
            service.stop()


def _serve(service: azurite.Azurite, port: int) -> int:
    """Start Azurite and serve until a signal (exit 0) or its own end (exit 1)."""
    from eventhub_balancer import errors

    try:
        service.start()
    except OSError as e:  # Azurite listens on 127.0.0.1 only: the port is what to change
        if e.errno != errno.EADDRINUSE:
            raise errors.ConfigurationError(f"Azurite cannot be started: {e}") from e
        raise errors.ConfigurationError(
            f"--port: 127.0.0.1:{port} is taken: choose another --port, or 0 for a free one"
        ) from e
    where = "in memory" if service.location is None else service.location

    def announce() -> None:
        print(service.connection_string, flush=True)
        print(
            f"Azurite blob service on {service.endpoint} ({where}); Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )

    return stopping.serve(
        poll_s=0.5, ended=lambda: not service.running, what="Azurite", announce=announce
    )
