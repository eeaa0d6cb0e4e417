"""An asyncio loop in a background thread, for the async SDK clients the scenario drives.

The runner itself is synchronous (it polls, sleeps and talks to the kubelet and the local API
server, which have sync interfaces); the producer and the checkpoint reads are async SDK
code. One loop thread serves them all, and every wait on it is bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")

#: The longest any single call onto the loop may take before the caller gives up.
CALL_TIMEOUT_S = 30.0


class LoopThread:
    def __init__(self, name: str = "scenario-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> LoopThread:
        self._thread.start()
        return self

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, _T], *, timeout: float = CALL_TIMEOUT_S) -> _T:
        return self.submit(coro).result(timeout=timeout)

    def stop(self, *, timeout: float = 10.0) -> None:
        if not self._thread.is_alive():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self.run(cancel_all(), timeout=timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
