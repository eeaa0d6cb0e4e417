"""The clock the consumer's waits are measured on: the running event loop's.

Its timers run on it, and so does a test's fake time (looptime): a deadline taken from it
and a sleep until it agree, where the wall clock would not.
"""

from __future__ import annotations

import asyncio


def now() -> float:
    """The running event loop's time."""
    return asyncio.get_running_loop().time()
