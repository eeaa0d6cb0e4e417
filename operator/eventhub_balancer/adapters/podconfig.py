"""The consumer pod's Kubernetes adapter: its own assignment ConfigMap, read, watched, annotated.

A pod reads its partitions from the ConfigMap the operator writes for it, through the API
rather than a volume (a mounted ConfigMap changes only after the kubelet's sync, about a
minute), and writes back only annotations on that ConfigMap. The kubernetes client is
synchronous: the watch runs in a daemon thread (so that a blocked long poll never holds up
the process's exit) and hands objects to the event loop; short calls run in worker threads,
each with a request timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client import exceptions as k8s_errors

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps

logger = logging.getLogger(__name__)

#: The server ends each watch after this long; a fresh one resumes from the last version.
WATCH_SECONDS: Final = 60
#: Every request, the watch's long poll included, gives up after this long.
REQUEST_TIMEOUT_S: Final = WATCH_SECONDS + 10
SHORT_REQUEST_TIMEOUT_S: Final = 10

#: Consecutive failed attempts to list or watch before the watch gives up (the pod then exits
#: and Kubernetes restarts it): about two minutes with the backoff below.
RECONNECT_ATTEMPTS: Final = 15
RECONNECT_BACKOFF_S: Final = 0.5
RECONNECT_BACKOFF_MAX_S: Final = 10.0


def api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials inside a pod, else the kubeconfig (``$KUBECONFIG`` by default)."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return k8s.ApiClient(configuration)
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        client: k8s.ApiClient = k8s_config.new_client_from_config(config_file=path)  # type: ignore[no-untyped-call]
        return client
    except (k8s_config.ConfigException, OSError) as e:
        raise errors.ConfigurationError(
            f"no Kubernetes credentials: not in a cluster and the kubeconfig "
            f"({path or '~/.kube/config'}) is unusable: {e}"
        ) from e


class PodConfigMaps:
    """The assignment ConfigMap of one (EventHubConsumer, pod), found by its labels."""

    def __init__(
        self, *, namespace: str, consumer: str, pod: str, kubeconfig: str | None = None
    ) -> None:
        self.namespace = namespace
        self.consumer = consumer
        self.pod = pod
        self._api_client = api_client(kubeconfig)
        self._core = k8s.CoreV1Api(self._api_client)
        labels = configmaps.labels(consumer=consumer, pod=pod)
        self.selector = ",".join(
            f"{k}={labels[k]}" for k in (configmaps.LABEL_CONSUMER, configmaps.LABEL_POD)
        )
        #: The name as last seen (the operator may cut long names); the contract's otherwise.
        self.name = configmaps.configmap_name(consumer=consumer, pod=pod)

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]

    def _list(self) -> tuple[list[dict[str, Any]], str]:
        answer = self._core.list_namespaced_config_map(
            self.namespace,
            label_selector=self.selector,
            _request_timeout=SHORT_REQUEST_TIMEOUT_S,
        )
        items: list[dict[str, Any]] = [
            self._api_client.sanitize_for_serialization(i)  # type: ignore[no-untyped-call]
            for i in answer.items
        ]
        version = answer.metadata.resource_version if answer.metadata else None
        return items, str(version or "")

    def _pick(self, items: list[dict[str, Any]]) -> dict[str, Any] | None:
        if not items:
            return None
        if len(items) > 1:
            logger.warning("%d ConfigMaps match %s; using %s", len(items), self.selector, self.name)
            for item in items:
                if item.get("metadata", {}).get("name") == self.name:
                    return item
        chosen = items[0]
        self.name = str(chosen.get("metadata", {}).get("name", self.name))
        return chosen

    async def get(self) -> dict[str, Any] | None:
        """The ConfigMap now, or None when the operator has not written it (yet)."""
        try:
            items, _ = await asyncio.to_thread(self._list)
        except Exception as e:
            raise _wrap(e, f"cannot list ConfigMaps {self.selector} in {self.namespace}") from e
        return self._pick(items)

    async def watch(self) -> AsyncIterator[dict[str, Any]]:
        """The ConfigMap now and after every change; ``{}`` when it is deleted or absent.

        Reconnects with backoff; raises :class:`errors.TransientError` after
        ``RECONNECT_ATTEMPTS`` failures in a row.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def put(kind: str, item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, item))

        thread = threading.Thread(
            target=self._watch_thread, args=(put, stop), name="configmap-watch", daemon=True
        )
        thread.start()
        try:
            while True:
                kind, item = await queue.get()
                if kind == "error":
                    raise item
                yield item
        finally:
            stop.set()

    def _watch_thread(self, put: Any, stop: threading.Event) -> None:
        failures = 0
        backoff = RECONNECT_BACKOFF_S
        while not stop.is_set():
            try:
                items, version = self._list()
                put("object", self._pick(items) or {})
                failures, backoff = 0, RECONNECT_BACKOFF_S
                while not stop.is_set():
                    version = self._watch_once(put, stop, version)
            except Exception as e:
                if stop.is_set():
                    return
                failures += 1
                logger.warning(
                    "watching ConfigMap %s/%s failed (%s); reconnect %d/%d in %.1f s",
                    self.namespace,
                    self.name,
                    type(e).__name__,
                    failures,
                    RECONNECT_ATTEMPTS,
                    backoff,
                )
                if failures >= RECONNECT_ATTEMPTS:
                    put("error", _wrap(e, f"gave up watching ConfigMap {self.selector}"))
                    return
                stop.wait(backoff)
                backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX_S)

    def _watch_once(self, put: Any, stop: threading.Event, version: str) -> str:
        """One watch request from ``version``; returns the version to resume from."""
        watcher = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in watcher.stream(  # type: ignore[no-untyped-call]
                self._core.list_namespaced_config_map,
                self.namespace,
                label_selector=self.selector,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=REQUEST_TIMEOUT_S,
            ):
                if stop.is_set():
                    return version
                kind = event.get("type")
                raw = event.get("raw_object") or {}
                if kind == "ERROR":
                    # 410 Gone: our version is too old; list again.
                    raise k8s_errors.ApiException(status=int(raw.get("code", 500)), reason="watch")
                version = str(raw.get("metadata", {}).get("resourceVersion", version))
                if kind in ("ADDED", "MODIFIED"):
                    self.name = str(raw.get("metadata", {}).get("name", self.name))
                    put("object", raw)
                elif kind == "DELETED":
                    put("object", {})
        finally:
            watcher.stop()  # type: ignore[no-untyped-call]
        return version

    def _patch(self, annotations: Mapping[str, str]) -> None:
        self._core.patch_namespaced_config_map(
            self.name,
            self.namespace,
            {"metadata": {"annotations": dict(annotations)}},
            _content_type="application/merge-patch+json",
            _request_timeout=SHORT_REQUEST_TIMEOUT_S,
        )

    async def annotate(self, annotations: Mapping[str, str]) -> None:
        """Merge these annotations into the ConfigMap (a missing ConfigMap is not an error:
        the operator deleted it, so nobody waits for our answer)."""
        try:
            await asyncio.to_thread(self._patch, annotations)
        except k8s_errors.ApiException as e:
            if e.status == 404:
                logger.info(
                    "ConfigMap %s/%s is gone: acknowledgement dropped", self.namespace, self.name
                )
                return
            raise _wrap(e, f"cannot annotate ConfigMap {self.namespace}/{self.name}") from e
        except Exception as e:
            raise _wrap(e, f"cannot annotate ConfigMap {self.namespace}/{self.name}") from e


def _wrap(error: BaseException, what: str) -> errors.EventHubBalancerError:
    if isinstance(error, errors.EventHubBalancerError):
        return error
    if isinstance(error, k8s_errors.ApiException) and error.status in (401, 403):
        return errors.ConfigurationError(
            f"{what}: HTTP {error.status}: the pod's ServiceAccount needs list, watch and "
            "patch on configmaps in its namespace (see manifests/examples/30-consumer-rbac.yaml)"
        )
    status = getattr(error, "status", None)
    detail = f"HTTP {status}" if status else type(error).__name__
    return errors.TransientError(f"{what}: {detail}")
