"""Loopback ports in wire tests: whether a server still listens on one."""

from __future__ import annotations

import socket


def accepts(port: int) -> bool:
    """Whether something accepts a connection on 127.0.0.1:``port`` (within 0.5 s)."""
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False
