"""The pod's assignment ConfigMap on an in-memory API, and a runtime that follows it.

``assignments.ConfigMapSource`` sees only its client's ``watch`` and ``annotate``:
`FakeConfigMaps` stands in for both, so that tests on fake time can write, strip or delete
the ConfigMap as the operator or a human would, and make the pod's patches fail as a
refusing, throttling or unreachable API server does. The rest of the pod is the real runtime
on the in-memory hub and store of ``consumerfakes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

from eventhub_balancer.adapters import podconfig, podreconnects
from eventhub_balancer.consumer import assignments, partitions, runtime
from eventhub_balancer.contracts import configmaps
from tests.support import consumerfakes

FAST = partitions.BatchSettings(batch_size=10, max_wait=0.05, retry_backoff=0.01)


class FakeConfigMaps:
    """The pod's ConfigMap on an in-memory API server, as ``ConfigMapSource`` sees it.

    Every write (the operator's, a human's, the pod's own annotation patch) is one watch
    event, and a patch that changes nothing is none, as on a real server."""

    def __init__(self) -> None:
        self.body: dict[str, Any] | None = None
        self.refused: dict[str, int] = {}
        #: Every patch the pod sent: (loop time, annotations).
        self.patches: list[tuple[float, dict[str, str]]] = []
        #: While set, every patch fails with what it returns.
        self.failure: Callable[[], Exception] | None = None
        #: The watch's reconnect state, as `podconfig.PodConfigMaps` keeps it (refusals).
        self.reconnects = podreconnects.Reconnects()
        self.name = configmaps.configmap_name(consumer="orders", pod="pod-a")
        #: Called once a patch is applied and before its answer comes back (a hand that
        #: writes in between, seen by the watch first).
        self.before_answer: Callable[[], None] | None = None
        self._version = 0
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def _changed(self) -> None:
        """One write: a new resourceVersion, and its watch event."""
        assert self.body is not None
        self._version += 1
        self.body["metadata"]["resourceVersion"] = str(self._version)
        self._events.put_nowait(copy.deepcopy(self.body))

    def write(self, body: Mapping[str, Any]) -> None:
        """The operator (or a human) writes the whole object."""
        self.body = copy.deepcopy(dict(body))
        self._changed()

    def strip(self, *keys: str) -> None:
        """``kubectl annotate configmap ... key-``."""
        assert self.body is not None
        annotations = self.body["metadata"].get("annotations") or {}
        self.body["metadata"]["annotations"] = {
            k: v for k, v in annotations.items() if k not in keys
        }
        self._changed()

    def delete(self) -> None:
        """``kubectl delete configmap``, or its EventHubConsumer's clean-up: the watch says
        so with ``{}``, as `podconfig.PodConfigMaps.watch` does."""
        self.body = None
        self._events.put_nowait({})

    def annotations(self) -> dict[str, str]:
        if self.body is None:
            return {}
        return dict(self.body["metadata"].get("annotations") or {})

    def restarted(self) -> None:
        """The pod's container restarted: the events its old watch had not read are gone, and
        the new process's watch starts with the object as it stands."""
        self._events = asyncio.Queue()
        if self.body is not None:
            self._events.put_nowait(copy.deepcopy(self.body))

    async def watch(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self._events.get()

    async def annotate(self, annotations: Mapping[str, str]) -> str | None:
        self.patches.append((consumerfakes.loop_time(), dict(annotations)))
        if self.failure is not None:
            raise self.failure()
        if self.body is None:
            return None  # 404: the operator deleted it, nobody waits for the answer
        merged = {**self.annotations(), **annotations}
        if merged != self.annotations():
            self.body["metadata"]["annotations"] = merged
            self._changed()
        version = str(self.body["metadata"]["resourceVersion"])
        if self.before_answer is not None:
            self.before_answer()
            for _ in range(100):  # the watch takes what it shows first
                if self._events.empty():
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0)
        return version


@contextlib.asynccontextmanager
async def running(
    maps: FakeConfigMaps,
    hub: consumerfakes.FakeHub,
    store: consumerfakes.FakeStore,
    *,
    handle: consumerfakes.FakeStoreHandle | None = None,
) -> AsyncIterator[runtime.Runtime]:
    source = assignments.ConfigMapSource(cast(podconfig.PodConfigMaps, maps))
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders", pod="pod-a", batch=FAST, shutdown_timeout=2.0
        ),
        source=source,
        backends=consumerfakes.fake_backends(hub, handle or store.handle("pod-a")),
        processor=consumerfakes.Recorder(),
        exit_process=_no_exit,
    )
    task = asyncio.create_task(consumer.run())
    try:
        yield consumer
    finally:
        consumer.request_shutdown()
        async with asyncio.timeout(10):
            await task


def _no_exit(reason: str) -> None:
    raise AssertionError(f"the runtime asked to exit: {reason}")


def operators(generation: int, partitions_: Mapping[str, tuple[int, str]]) -> dict[str, Any]:
    body = consumerfakes.configmap(generation, partitions_)
    body["metadata"]["annotations"] = {configmaps.ANNOTATION_POD_UID: "uid-a"}
    return body
