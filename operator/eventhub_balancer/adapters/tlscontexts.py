"""The one TLS context of a process for its Event Hubs connections, operator and pods alike.

Given none, the SDK builds a context for every connection it opens, loading a CA bundle each
time (about 40 ms of CPU on the event loop): a pod taking over five partitions stalled its
loop, and so the fencing of its other partitions, for a fifth of a second, and at 1,000
consumers it was a third of the operator's CPU (docs/scale.md). This is the context the SDK
builds by default (``connection_verify`` unset): a TLS client that verifies the server's
certificate against certifi's CA bundle, and its host name. A connection without TLS (the
local emulator) does not use it.
"""

from __future__ import annotations

import functools
import ssl

import certifi


@functools.cache
def eventhub_context() -> ssl.SSLContext:
    """The process's context for Event Hubs (built once; a bounded memo of one value)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(certifi.where())
    return context
