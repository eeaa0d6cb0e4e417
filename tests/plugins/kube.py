"""Fixtures for the local Kubernetes API server, the kubernetes client and kopf against it.

- ``local_kube``: a running :class:`LocalKubeAPI` (stopped after the test).
- ``kubeconfig``: a kubeconfig for it; ``$KUBECONFIG`` points at it for the test (also the
  kubernetes client's default location, which it reads once at import).
- ``kube_client_factory`` / ``kube_client``: ``kubernetes.client.ApiClient`` instances for it.
- ``kopf_operator``: runs kopf (a registry of handlers) against it in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI

#: Bounds for starting and stopping kopf in tests (it starts in well under a second).
KOPF_START_TIMEOUT = 15.0
KOPF_STOP_TIMEOUT = 15.0


@pytest.fixture
def local_kube() -> Iterator[LocalKubeAPI]:
    with LocalKubeAPI() as api:
        yield api


@pytest.fixture
def kubeconfig(local_kube: LocalKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = local_kube.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    import kubernetes.config.kube_config

    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    return path


@pytest.fixture
def kube_client_factory(kubeconfig: Path) -> Iterator[Callable[[], Any]]:
    """Make ``kubernetes.client.ApiClient`` instances for the local server (closed after)."""
    import kubernetes

    clients: list[Any] = []

    def make() -> Any:
        client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def kube_client(kube_client_factory: Callable[[], Any]) -> Any:
    return kube_client_factory()


@pytest.fixture
def kopf_operator(
    local_kube: LocalKubeAPI,
) -> Callable[..., contextlib.AbstractContextManager[None]]:
    """``with kopf_operator(registry, namespaces=["ns"]): ...`` runs kopf until the block ends.

    Login goes to the local server (a handler added to the registry unless ``login=False``),
    peering is off unless ``standalone=False`` is passed, and kopf stops before the server.
    """
    import kopf

    @contextlib.contextmanager
    def run(
        registry: Any,
        *,
        namespaces: list[str] | None = None,
        standalone: bool = True,
        settings: Any = None,
        login: bool = True,
        **kwargs: Any,
    ) -> Iterator[None]:
        if login:  # else the registry brings its own login handler

            @kopf.on.login(registry=registry)
            def login_to_local_kube(**_: Any) -> Any:
                return kopf.ConnectionInfo(server=local_kube.url, token="ehb-local-dummy-token")

        stop = threading.Event()
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            try:
                asyncio.run(
                    kopf.operator(
                        registry=registry,
                        settings=settings or kopf.OperatorSettings(),
                        standalone=standalone,
                        clusterwide=not namespaces,
                        namespaces=namespaces or (),
                        stop_flag=stop,
                        ready_flag=ready,
                        **kwargs,
                    )
                )
            except BaseException as e:
                failure.append(e)
                ready.set()

        thread = threading.Thread(target=main, name="kopf-operator", daemon=True)
        thread.start()
        try:
            if not ready.wait(KOPF_START_TIMEOUT):
                raise TimeoutError(f"kopf did not get ready in {KOPF_START_TIMEOUT} s")
            if failure:
                raise RuntimeError("kopf failed to start") from failure[0]
            yield
        finally:
            stop.set()
            thread.join(KOPF_STOP_TIMEOUT)
            if thread.is_alive():
                logging.getLogger(__name__).warning("kopf did not stop in time")

    return run
