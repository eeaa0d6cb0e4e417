"""The consumer pod's Kubernetes adapter: its own assignment ConfigMap, read, watched, annotated.

A pod reads its partitions from the ConfigMap the operator writes for it, through the API
rather than a volume (a mounted ConfigMap changes only after the kubelet's sync, about a
minute), and writes back only annotations on that ConfigMap. The kubernetes client is
synchronous: each watch session runs in a daemon thread (so that a blocked long poll never
holds up the process's exit) and hands objects to the event loop; short calls run in worker
threads, each with a request timeout.

Only the operator's ConfigMap for this very pod is applied (`configmaps.refusal`): the
pinned name, the managed-by label, this pod's labels, data naming this pod and consumer, and
this pod's uid. Anyone who may write ConfigMaps in the namespace can label one with our
selector, so whatever else matches is ignored, logged and counted (``refused``), never
applied, and never taken for the deletion of ours either.

An unreachable API server is not a reason to stop: fencing at the checkpoint blobs keeps a
pod that goes on with its last assignment safe, so the watch reconnects with backoff for as
long as the outage lasts and the pod keeps processing meanwhile; refused credentials
(401/403) as well, said once with the fix, until a RoleBinding pruned by a GitOps sync is
back. That policy lives in ``adapters.podreconnects``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client import exceptions as k8s_errors

from eventhub_balancer import errors
from eventhub_balancer.adapters import kuberetries, podpatches, podreconnects
from eventhub_balancer.contracts import configmaps

logger = logging.getLogger(__name__)

#: The server ends each watch after this long; a fresh one resumes from the last version.
WATCH_SECONDS: Final = 60
#: Every request, the watch's long poll included, gives up after this long.
REQUEST_TIMEOUT_S: Final = WATCH_SECONDS + 10
#: A watch that ends sooner than this with nothing delivered is asked again only after a pause
#: (`podreconnects.backoff`): the server asks for no such thing, and a fleet of pods that asked
#: again at once would flood it.
QUICK_WATCH_S: Final = 1.0
SHORT_REQUEST_TIMEOUT_S: Final = 10
#: The runtime's loop waits this long for an acknowledgement patch: a loop held longer than
#: its heartbeat limit (5 s, ``consumer.endpoints``) fails /healthz, which during an API
#: outage would get a healthy pod restarted. The request itself goes on (`podpatches`).
ANNOTATE_TIMEOUT_S: Final = 2.0
#: An acknowledgement patch waits this long for its answer (an admission webhook may take up
#: to 30 s), and this long to connect: the API server drops a request its client gave up.
PATCH_ANSWER_TIMEOUT_S: Final = 30.0
PATCH_CONNECT_TIMEOUT_S: Final = SHORT_REQUEST_TIMEOUT_S
#: A patch after this long without one opens a fresh connection: a NAT gateway or load
#: balancer may have dropped the idle one without a reset (Azure's after 4 minutes), and a
#: patch sent into it would wait `PATCH_ANSWER_TIMEOUT_S` for an answer that cannot come.
PATCH_IDLE_S: Final = 30.0
#: While the watch cannot reach the API server, at most one acknowledgement attempt per
#: this long; the others fail at once (the runtime writes them again on a later turn).
ANNOTATE_RETRY_DOWN_S: Final = 5.0

#: Refused ConfigMaps are named in a warning once each, up to this many names (then at debug
#: level): whoever forges them must not be able to flood the pod's log.
REFUSALS_LOGGED: Final = 64


def api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials inside a pod, else the kubeconfig (``$KUBECONFIG`` by default);
    a request that times out is not sent again (`kuberetries.Retries`)."""
    configuration = k8s.Configuration()
    configuration.retries = kuberetries.client_retries()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return k8s.ApiClient(configuration)
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)  # type: ignore[no-untyped-call]
        return k8s.ApiClient(configuration)
    except (k8s_config.ConfigException, OSError) as e:
        raise errors.ConfigurationError(
            f"no Kubernetes credentials: not in a cluster and the kubeconfig "
            f"({path or '~/.kube/config'}) is unusable: {e}"
        ) from e


class PodConfigMaps:
    """The assignment ConfigMap of one (EventHubConsumer, pod): listed and watched by its
    labels, applied only under its pinned name and after `configmaps.refusal` passes."""

    def __init__(
        self,
        *,
        namespace: str,
        consumer: str,
        pod: str,
        pod_uid: str = "",
        kubeconfig: str | None = None,
        spawn: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.consumer = consumer
        self.pod = pod
        #: The pod's uid (Downward API ``POD_UID``); without it the uid is not checked.
        self.pod_uid = pod_uid
        self._api_client = api_client(kubeconfig)
        self._core = k8s.CoreV1Api(self._api_client)
        #: Patches have connections of their own (the watch keeps the others busy), renewed
        #: after `PATCH_IDLE_S` without a patch.
        self._patch_client = api_client(kubeconfig)
        self._patched_at: float | None = None
        self.selector = configmaps.pod_selector(consumer=consumer, pod=pod)
        #: Pinned: the operator writes this name (cut and hashed to fit) and no other.
        self.name = configmaps.configmap_name(consumer=consumer, pod=pod)
        #: Runs one watch session; a daemon thread unless a test runs it inline.
        self._spawn = spawn or _daemon_thread
        self.reconnects = podreconnects.Reconnects()
        self._annotate_after = 0.0
        self._patches = podpatches.Patches(lambda annotations: self._patch(annotations))
        #: ConfigMaps refused so far, by `configmaps.refusal` reason (for /metrics).
        self.refused: dict[str, int] = {}
        #: The uid of the ConfigMap last accepted as this pod's, and whether it had
        #: annotations: acknowledgements are written into it only. "" once it was deleted or
        #: replaced under its name (by another pod's), None before the first read.
        self._own: tuple[str, bool] | None = None
        self._logged: set[tuple[str, str]] = set()
        if not pod_uid:
            logger.warning(
                "POD_UID is not set: the assignment ConfigMap's pod uid is not checked; add "
                "POD_UID (fieldRef metadata.uid) to the container's env"
            )

    def accept(self, body: Mapping[str, Any]) -> bool:
        """True when ``body`` is this pod's own assignment; else logged, counted, False."""
        refused = configmaps.refusal(
            body, consumer=self.consumer, pod=self.pod, pod_uid=self.pod_uid
        )
        metadata = body.get("metadata") or {}
        if refused is None:
            self._own = (str(metadata.get("uid") or ""), bool(metadata.get("annotations")))
            return True
        if metadata.get("name") == self.name:
            self._own = ("", False)  # replaced by someone else's: nothing of ours to annotate
        reason, message = refused
        self.refused[reason] = self.refused.get(reason, 0) + 1
        name = str(metadata.get("name", ""))[:253]
        first = (reason, name) not in self._logged and len(self._logged) < REFUSALS_LOGGED
        if first:
            self._logged.add((reason, name))
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "ignoring a ConfigMap that matches this pod's labels in %s (%s): %s; it is not "
            "applied (ehb_consumer_assignment_refusals_total{reason=%r})",
            self.namespace,
            reason,
            message,
            reason,
        )
        return False

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]
        self._patch_client.close()  # type: ignore[no-untyped-call]

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
        """This pod's own ConfigMap among those listed, or None (every other one refused)."""
        chosen = None
        for item in items:
            if self.accept(item):
                chosen = item
        if chosen is None:
            self._own = ("", False)
        return chosen

    async def get(self) -> dict[str, Any] | None:
        """The ConfigMap now, or None when the operator has not written it (yet)."""
        try:
            items, _ = await asyncio.to_thread(self._list)
        except Exception as e:
            raise podreconnects.wrap(
                e, f"cannot list ConfigMaps {self.selector} in {self.namespace}"
            ) from e
        return self._pick(items)

    async def watch(self) -> AsyncIterator[dict[str, Any]]:
        """The ConfigMap now and after every change; ``{}`` when it is deleted or absent.

        Reconnects with backoff (``podreconnects.RECONNECT_BACKOFF_S`` doubling up to
        ``podreconnects.RECONNECT_BACKOFF_MAX_S``) for as long as the API server is
        unreachable, yielding nothing meanwhile, so that the pod goes on with what it was last
        given. Refused credentials (401/403) too: said once as an ERROR that names the fix
        (then every ``podreconnects.REFUSAL_LOG_EVERY_S``), never the end of the watch.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        reconnects = self.reconnects
        stop = threading.Event()
        try:
            while True:
                stop = threading.Event()

                def put(kind: str, item: Any, stop: threading.Event = stop) -> None:
                    if not stop.is_set():
                        loop.call_soon_threadsafe(queue.put_nowait, (kind, item))

                self._spawn(functools.partial(self._session, put, stop))
                while True:
                    kind, item = await queue.get()
                    if kind == "failed":
                        break
                    if kind == "listed":
                        self._recovered(reconnects, loop.time())
                    else:
                        reconnects.healthy()
                    if kind != "healthy":
                        yield item
                stop.set()
                delay = reconnects.after_failure(item, now=loop.time())
                where = f"{self.namespace}/{self.name}"
                if podreconnects.refused(item):
                    if reconnects.should_say_refusal(now=loop.time()):
                        logger.error(
                            "%s; going on with the last assignment, asking again every %.0f s "
                            "at most",
                            podreconnects.wrap(item, f"watching ConfigMap {where}"),
                            podreconnects.RECONNECT_BACKOFF_MAX_S,
                        )
                elif reconnects.should_log(now=loop.time()):
                    logger.warning(
                        "watching ConfigMap %s/%s failed %d time(s) over %.0f s (last: %s); "
                        "going on with the last assignment, reconnecting in %.1f s",
                        self.namespace,
                        self.name,
                        reconnects.failures,
                        reconnects.failing(now=loop.time()),
                        podreconnects.describe(item),
                        delay,
                    )
                await asyncio.sleep(delay)
        finally:
            stop.set()

    def _recovered(self, reconnects: podreconnects.Reconnects, now: float) -> None:
        """The API answered a list: say so if a warning said it did not."""
        ended = reconnects.recovery(now=now)
        reconnects.reachable(now=now)
        if ended is not None:
            logger.info(
                "watching ConfigMap %s/%s again after %d failure(s) over %.0f s",
                self.namespace,
                self.name,
                *ended,
            )

    def _session(self, put: Callable[[str, Any], None], stop: threading.Event) -> None:
        """List, then watch from the listed version until a failure (reported, not raised)."""
        try:
            gone = 0  # lists in a row whose version was gone before a watch worked
            while not stop.is_set():
                items, version = self._list()
                put("listed", self._pick(items) or {})
                watched = False
                quick = 0  # watches in a row that ended at once with nothing
                try:
                    while not stop.is_set():
                        opened = time.monotonic()
                        resumed = self._watch_once(put, stop, version)
                        watched = True
                        put("healthy", None)
                        if resumed == version and time.monotonic() - opened < QUICK_WATCH_S:
                            # Ended at once with nothing (a proxy or a server that closes
                            # watches): asked again at once, a pod sent ten a second. Back off
                            # as for a failure, until a watch lasts or delivers.
                            quick += 1
                            stop.wait(podreconnects.backoff(quick))
                        else:
                            quick = 0
                        version = resumed
                except k8s_errors.ApiException as e:
                    # 410 Gone: our version is too old (not an outage): list again at once. A
                    # list compacted before its first watch began is a race, listed again at
                    # once too; a second in a row backs off, as a failure does.
                    gone = 0 if watched else gone + 1
                    if e.status != 410 or gone > 1:
                        raise
        except Exception as e:
            put("failed", e)

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
                    # 410 Gone: our version is too old; the session lists again.
                    raise k8s_errors.ApiException(status=int(raw.get("code", 500)), reason="watch")
                version = str(raw.get("metadata", {}).get("resourceVersion", version))
                ours = raw.get("metadata", {}).get("name") == self.name
                if kind in ("ADDED", "MODIFIED"):
                    if self.accept(raw):
                        put("object", raw)
                    elif ours:
                        put("object", {})  # ours, but another pod uid or data: as if absent
                elif kind == "DELETED" and ours:
                    self._own = ("", False)
                    put("object", {})
        finally:
            watcher.stop()  # type: ignore[no-untyped-call]
        return version

    def _patch(self, annotations: Mapping[str, str]) -> str:
        now = time.monotonic()
        if self._patched_at is None or now - self._patched_at >= PATCH_IDLE_S:
            self._patch_client.rest_client.pool_manager.clear()
        self._patched_at = now
        if self._own is not None and not self._own[0]:
            raise k8s_errors.ApiException(status=404, reason="none of this pod's")
        body, kind = podpatches.body(annotations, own=self._own)
        answer = k8s.CoreV1Api(self._patch_client).patch_namespaced_config_map(
            self.name,
            self.namespace,
            body,
            _content_type=kind,
            _request_timeout=(PATCH_CONNECT_TIMEOUT_S, PATCH_ANSWER_TIMEOUT_S),
        )
        return str(getattr(answer.metadata, "resource_version", None) or "")

    async def annotate(self, annotations: Mapping[str, str]) -> str | None:
        """Merge these annotations into the ConfigMap; returns the resourceVersion it had
        then. None: no ConfigMap of this pod's (the operator deleted it: nobody waits).

        Waits at most ``ANNOTATE_TIMEOUT_S``, then raises :class:`errors.TransientError`
        while the request goes on (`podpatches.Patches`: a later call takes its answer); while
        the watch finds the API server unreachable, new requests are spaced by
        ``ANNOTATE_RETRY_DOWN_S`` and the others raise at once, so that an outage never holds
        the caller up.
        """
        now = asyncio.get_running_loop().time()
        what = f"cannot annotate ConfigMap {self.namespace}/{self.name}"
        if self.reconnects.down and now < self._annotate_after and not self._patches.waiting:
            raise errors.TransientError(
                f"{what}: the API server is unreachable (for "
                f"{self.reconnects.outage(now=now):.0f} s)"
            )
        try:
            written = await self._patches.write(annotations, within=ANNOTATE_TIMEOUT_S)
        except Exception as e:
            status = e.status if isinstance(e, k8s_errors.ApiException) else None
            if status == 404 or (status == 422 and self._own is not None):
                logger.info(
                    "ConfigMap %s/%s is gone or no longer this pod's (HTTP %s): acknowledgement "
                    "dropped",
                    self.namespace,
                    self.name,
                    status,
                )
                return None
            self._annotate_after = now + ANNOTATE_RETRY_DOWN_S
            raise podreconnects.wrap(e, what) from e
        if written is None:
            raise errors.TransientError(
                f"{what}: the API server has not answered yet (the patch goes on, "
                f"up to {PATCH_ANSWER_TIMEOUT_S:g} s)"
            )
        return written


def _daemon_thread(target: Callable[[], None]) -> None:
    threading.Thread(target=target, name="configmap-watch", daemon=True).start()
