"""Runs the local Kubernetes API server in a thread of its own, with its own event loop.

A thread, because the synchronous kubernetes client blocks its caller: called from the
server's own loop it would wait forever for a response that loop can no longer serve.
Tests and the CLI use it from ordinary synchronous code; async code (kopf) talks to it over
HTTP like to any cluster.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import kmock

from eventhub_balancer_devstack.kube import kubeconfigs, resources, serving, storage

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long start() waits for the port to be bound, and stop() for the thread to end.
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

#: How long a direct call (create_object & co.) waits for the server's loop.
CALL_TIMEOUT = 10.0


def _repository_crds() -> Path | None:
    # operator/eventhub_balancer/local/kube/running.py -> the repository root has crds/.
    candidate = Path(__file__).resolve().parents[3] / "crds"
    return candidate if candidate.is_dir() else None


#: The repository's crds/ when running from a checkout, else None.
REPOSITORY_CRDS = _repository_crds()


def _split_resource(resource: str) -> tuple[str, str, str]:
    """``v1/pods`` or ``eventhub-balancer.dev/v1alpha1/eventhubconsumers`` -> its parts."""
    parts = resource.strip("/").split("/")
    if len(parts) == 2:
        return "", parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise ValueError(f"resource {resource!r}: expected 'v1/plural' or 'group/version/plural'")


class LocalKubeAPI:
    """A local Kubernetes API server for kopf and the kubernetes client, on 127.0.0.1.

    ``start()``/``stop()`` or ``with LocalKubeAPI() as api:``; ``api.url`` is its address
    and ``api.write_kubeconfig(path)`` a kubeconfig for it. ``create_object``/``get_object``/
    ``list_objects``/``patch_object``/``delete_object`` reach the store directly (no HTTP),
    from any thread except the server's own.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        crds_dir: Path | None = REPOSITORY_CRDS,
        auto_namespaces: bool = True,
        bookmark_interval: float = serving.BOOKMARK_INTERVAL,
    ) -> None:
        self._host = host
        self._port = port
        self._crds_dir = Path(crds_dir) if crds_dir is not None else None
        self._auto_namespaces = auto_namespaces
        self._bookmark_interval = bookmark_interval
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._url: str | None = None
        self._handler: serving.LocalKubeHandler | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` once started."""
        if self._url is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        return self._url

    @property
    def handler(self) -> serving.LocalKubeHandler:
        """The kmock handler: its ``requests`` and DSL, for tests that inspect or inject."""
        if self._handler is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        return self._handler

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("the local Kubernetes API is already started")
        crds = list(resources.load_crd_files(self._crds_dir)) if self._crds_dir else []
        self._thread = threading.Thread(
            target=self._run, args=(crds,), name="local-kube-api", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise RuntimeError(f"the local Kubernetes API did not start in {START_TIMEOUT} s")
        if self._failure is not None:
            self._thread.join(STOP_TIMEOUT)
            self._thread = None
            raise RuntimeError("the local Kubernetes API failed to start") from self._failure
        logger.info("local Kubernetes API serving at %s", self._url)
        return self

    def stop(self) -> None:
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may have just closed
                loop.call_soon_threadsafe(stopping.set)
        thread.join(STOP_TIMEOUT)
        if thread.is_alive():
            logger.warning("the local Kubernetes API thread did not stop in %s s", STOP_TIMEOUT)
        self._thread = None
        self._url = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, crds: list[dict[str, Any]]) -> None:
        try:
            asyncio.run(self._serve(crds))
        except BaseException as e:  # reported to start(); the thread must not die silently
            self._failure = e
            self._ready.set()

    async def _serve(self, crds: list[dict[str, Any]]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        store = storage.Store(auto_namespaces=self._auto_namespaces)
        store.install_crds(crds)
        handler = serving.LocalKubeHandler(store=store, bookmark_interval=self._bookmark_interval)
        self._handler = handler
        async with handler, kmock.Server(handler, host=self._host, port=self._port) as server:
            self._url = f"http://{server.host}:{server.port}"
            self._ready.set()
            await self._stopping.wait()
            store.close_subscriptions()  # end the watch streams, or shutdown waits for them

    # -- kubeconfig --------------------------------------------------------------------------

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig for this server (plain HTTP, dummy token); returns the path."""
        return kubeconfigs.write(Path(path), server=self.url, namespace=namespace)

    # -- direct access to the store ------------------------------------------------------------

    def _call(self, fn: Callable[[storage.Store], T]) -> T:
        loop = self._loop
        if loop is None or self._handler is None or self._url is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is loop:
                raise RuntimeError("direct calls from the server's own loop would deadlock")
        store = self._handler.store

        async def call() -> T:
            return fn(store)

        future = asyncio.run_coroutine_threadsafe(call(), loop)
        try:
            return future.result(CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _spec(self, store: storage.Store, resource: str) -> resources.ResourceSpec:
        group, version, plural = _split_resource(resource)
        return store.resolve(group=group, version=version, plural=plural)

    def create_object(
        self, resource: str, body: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Create as a POST would (server-set metadata, watch events); returns the object."""
        return self._call(
            lambda s: s.create(self._spec(s, resource), namespace=namespace, body=body)
        )

    def get_object(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """The object, or None if it does not exist."""

        def get(store: storage.Store) -> dict[str, Any] | None:
            spec = self._spec(store, resource)
            for body in store.select(spec, namespace=namespace):
                if body["metadata"]["name"] == name:
                    return body
            return None

        return self._call(get)

    def list_objects(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        from eventhub_balancer_devstack.kube import selectors

        selector = selectors.parse(labels=label_selector, fields=field_selector)
        return self._call(
            lambda s: s.select(self._spec(s, resource), namespace=namespace, selector=selector)
        )

    def patch_object(
        self,
        resource: str,
        name: str,
        patch: dict[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Merge-patch an object; ``subresource="status"`` to set a pod's or CR's status."""
        return self._call(
            lambda s: s.patch(
                self._spec(s, resource),
                namespace=namespace,
                name=name,
                patch=patch,
                patch_type="merge",
                subresource=subresource,
            )
        )

    def delete_object(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return self._call(
            lambda s: s.delete(self._spec(s, resource), namespace=namespace, name=name)
        )
