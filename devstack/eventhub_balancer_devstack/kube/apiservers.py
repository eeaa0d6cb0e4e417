"""Runs the local Kubernetes API server on a background loop, in a thread of its own.

A thread, because the synchronous kubernetes client blocks its caller: called from the
server's own loop it would wait forever for a response that loop can no longer serve.
Tests and the CLI use it from ordinary synchronous code; async code (kopf) talks to it over
HTTP like to any cluster.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import aiohttp.test_utils
import kmock

from eventhub_balancer import runners
from eventhub_balancer_devstack.kube import (
    failures,
    histories,
    identities,
    kubeconfigs,
    pausegates,
    resources,
    serving,
    storage,
    watchfaults,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long start() waits for the port to be bound, and stop() for the thread to end.
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

#: How long a direct call (create_object & co.) waits for the server's loop.
CALL_TIMEOUT = 10.0


def _repository_crds() -> Path | None:
    # devstack/eventhub_balancer_devstack/kube/apiservers.py -> the repository root has crds/.
    candidate = Path(__file__).resolve().parents[3] / "crds"
    return candidate if candidate.is_dir() else None


#: The repository's crds/ when running from a checkout, else None.
REPOSITORY_CRDS = _repository_crds()


def _install_crds(store: storage.Store, crds: list[dict[str, Any]]) -> None:
    """Create (or replace) CRDs as ``kubectl apply`` of the files would."""
    for crd in crds:
        try:
            store.create(resources.CRDS, namespace=None, body=crd)
        except failures.APIFailure as e:
            if e.reason != "AlreadyExists":
                raise
            name = str(crd["metadata"]["name"])
            current = store.get(resources.CRDS, namespace=None, name=name)
            version = current["metadata"]["resourceVersion"]
            body = {**crd, "metadata": {**crd["metadata"], "resourceVersion": version}}
            store.replace(resources.CRDS, namespace=None, name=name, body=body)


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

    #: It injects watch faults and pauses on demand (the real control plane does not).
    supports_faults = True

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
        self._loop: runners.BackgroundLoop | None = None
        self._url: str | None = None
        self._handler: serving.LocalKubeHandler | None = None
        self._gate: pausegates.PauseGate | None = None

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
        if self._loop is not None:
            raise RuntimeError("the local Kubernetes API is already started")
        crds = list(resources.load_crd_files(self._crds_dir)) if self._crds_dir else []
        loop = runners.BackgroundLoop(name="local-kube-api", timeout=STOP_TIMEOUT)
        loop.start(timeout=START_TIMEOUT)
        try:
            self._url = loop.enter(lambda: self._serving(crds), timeout=START_TIMEOUT)
        except TimeoutError as e:
            self._stop_loop(loop)
            raise RuntimeError(
                f"the local Kubernetes API did not start in {START_TIMEOUT} s"
            ) from e
        except OSError:
            # A taken port: the caller names the flag that chose it.
            self._stop_loop(loop)
            raise
        except BaseException as e:
            self._stop_loop(loop)
            if not isinstance(e, Exception):
                raise  # a Ctrl-C or an exit, not a failure to start
            raise RuntimeError("the local Kubernetes API failed to start") from e
        self._loop = loop
        logger.info("local Kubernetes API serving at %s", self._url)
        return self

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        self._url = None
        self._stop_loop(loop)

    @staticmethod
    def _stop_loop(loop: runners.BackgroundLoop) -> None:
        try:
            loop.stop(timeout=STOP_TIMEOUT)
        except TimeoutError:
            logger.warning("the local Kubernetes API thread did not stop in %s s", STOP_TIMEOUT)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @contextlib.asynccontextmanager
    async def _serving(self, crds: list[dict[str, Any]]) -> AsyncIterator[str]:
        """The server, entered on the background loop until stop(); yields its URL."""
        store = storage.Store(auto_namespaces=self._auto_namespaces)
        _install_crds(store, crds)
        handler = serving.LocalKubeHandler(store=store, bookmark_interval=self._bookmark_interval)
        self._handler = handler
        gate = self._gate = pausegates.PauseGate()

        def gated_server(
            raw: pausegates.RawHandler, *, host: str, port: int | None
        ) -> aiohttp.test_utils.RawTestServer:
            return aiohttp.test_utils.RawTestServer(gate.wrap(raw), host=host, port=port)

        async with (
            handler,
            kmock.Server(
                handler,
                host=self._host,
                port=self._port,
                server_cls=gated_server,  # type: ignore[arg-type]
            ) as server,
        ):
            yield f"http://{server.host}:{server.port}"
            gate.resume()  # held requests end with the server, not after it
            store.close_subscriptions()  # end the watch streams, or shutdown waits for them

    # -- outages ----------------------------------------------------------------------------

    def pause(self, *, exempt_tokens: Collection[str] = ()) -> None:
        """Stop answering: requests hang until `resume`, watches and requests in flight drop.

        Requests with a bearer token in ``exempt_tokens`` are served as usual. The direct
        calls below (``create_object`` & co.) reach the store without HTTP and keep working.
        """
        gate = self._gate
        if gate is None or self._loop is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        tokens = tuple(exempt_tokens)
        self._loop.call(lambda: gate.pause(exempt=tokens), timeout=CALL_TIMEOUT)

    def hold(self, path_part: str) -> None:
        """Hold the requests whose path contains ``path_part`` (``/events``) until `resume`,
        and answer the others: one resource that stops answering, not the whole server."""
        gate = self._gate
        if gate is None or self._loop is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        self._loop.call(lambda: gate.hold(path_part), timeout=CALL_TIMEOUT)

    def resume(self) -> None:
        """Answer again, the requests held since `pause` (or `hold`) first."""
        gate = self._gate
        if gate is None or self._loop is None:
            return
        self._loop.call(gate.resume, timeout=CALL_TIMEOUT)

    @property
    def paused(self) -> bool:
        return self._gate is not None and self._gate.paused

    # -- watch faults --------------------------------------------------------------------------

    def inject_watch_fault(
        self,
        kind: str,
        *,
        seconds: float,
        plural: str | None = None,
        lag_s: float = 0.0,
        close_after_s: float = 0.0,
    ) -> watchfaults.WatchFault:
        """Make the watches of ``plural`` (every resource when None) misbehave for ``seconds``.

        ``kind`` is one of `watchfaults.KINDS`: ``lag`` (events ``lag_s`` late), ``stall``
        (silence), ``gone`` (410 on resume), ``close`` (streams end ``close_after_s`` into the
        fault). Writes and reads are not affected. ValueError for a malformed fault.
        """
        handler = self.handler
        loop = self._loop
        if loop is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        return loop.call(
            lambda: handler.inject_watch_fault(
                kind, seconds=seconds, plural=plural, lag_s=lag_s, close_after_s=close_after_s
            ),
            timeout=CALL_TIMEOUT,
        )

    def clear_watch_faults(self) -> None:
        """End every watch fault at once (held events are delivered)."""
        handler, loop = self._handler, self._loop
        if handler is None or loop is None:
            return
        loop.call(handler.clear_watch_faults, timeout=CALL_TIMEOUT)

    def watch_fault_effects(self) -> dict[str, int]:
        """What the watch faults did so far: ``delayed`` events, ``expired`` resumes (410),
        streams ``closed`` early."""
        handler = self.handler
        return self._call(lambda _: dict(handler.watch_fault_effects))

    # -- the write record ----------------------------------------------------------------------

    def record_writes(self, *resources_: str) -> None:
        """Keep every committed write of these resources (``v1/configmaps``...) until read."""

        def record(store: storage.Store) -> None:
            for resource in resources_:
                store.record_writes(self._spec(store, resource))

        self._call(record)

    def take_writes(self) -> histories.Writes:
        """The committed writes of the recorded resources since the last call, oldest first."""
        return self._call(lambda s: s.take_writes())

    # -- kubeconfig --------------------------------------------------------------------------

    def write_kubeconfig(
        self,
        path: Path,
        *,
        namespace: str = "default",
        identity: identities.PodIdentity | None = None,
    ) -> Path:
        """Write a kubeconfig for this server; returns the path.

        Without ``identity`` it authenticates as the local administrator (a dummy token); with
        one, as that pod's service account, which admission policies see.
        """
        user = None if identity is None else identities.kubeconfig_user(identity)
        return kubeconfigs.write(Path(path), server=self.url, namespace=namespace, user=user)

    # -- direct access to the store ------------------------------------------------------------

    def _call(self, fn: Callable[[storage.Store], T]) -> T:
        loop = self._loop
        if loop is None or self._handler is None or self._url is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        store = self._handler.store
        # From the server's own thread this raises RuntimeError: waiting there would deadlock.
        return loop.call(lambda: fn(store), timeout=CALL_TIMEOUT)

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
