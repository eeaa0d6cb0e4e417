"""The operator benchmark's consumer doubles: every pod's runtime, for the hand-off only.

They keep no checkpoints and open no links. What they do is what the consumer runtime does
towards the operator:

- a revocation is acknowledged (`acknowledgement`): the partition's release and the generation
  applied, in the ConfigMap's annotations;
- a pod being deleted releases everything it holds (`shutdown_release`), as the runtime does
  on the SIGTERM its kubelet sends at once (`consumer.runtime`): the operator hands those
  partitions on as soon as it reads the release, without revoking them first.

They run in a process of their own (`processes`, role ``doubles``) and watch the ConfigMaps
and the Pods of the namespace; nobody polls.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import kubernetes.client

from eventhub_balancer.contracts import configmaps, podassignments
from eventhub_balancer_devstack.benchmarks import watching

#: Concurrent acknowledgements: pods acknowledge independently of each other.
ACK_WORKERS = 8


def acknowledgement(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The annotations a consumer writes for this ConfigMap (its revoked partitions released,
    its generation applied), or None when it has written them already."""
    parsed = podassignments.parse_data(body.get("data") or {})
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    released = configmaps.parse_released(annotations)
    wanted = {pid: e.epoch for pid, e in parsed.partitions.items() if e.state == "revoking"}
    merged = {str(p): e for p, e in {**released, **wanted}.items()}
    if merged == released and configmaps.parse_applied_generation(annotations) == parsed.generation:
        return None
    return {
        configmaps.ANNOTATION_RELEASED: configmaps.build_released(merged),
        configmaps.ANNOTATION_APPLIED_GENERATION: configmaps.build_applied_generation(
            parsed.generation
        ),
    }


def shutdown_release(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The annotation a consumer on SIGTERM writes for this ConfigMap: every partition it
    holds released at its epoch, owned or revoking (the generation applied stays: a stopping
    runtime applies nothing more). None when it has written that already."""
    parsed = podassignments.parse_data(body.get("data") or {})
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    released = configmaps.parse_released(annotations)
    held = {pid: e.epoch for pid, e in parsed.partitions.items()}
    merged = {str(p): e for p, e in {**released, **held}.items()}
    if merged == released:
        return None
    return {configmaps.ANNOTATION_RELEASED: configmaps.build_released(merged)}


class Doubles:
    """The doubles of every pod of one namespace: what the two watches saw, and the writes."""

    def __init__(self, write: Callable[[str, dict[str, Any]], None]) -> None:
        self._write = write
        self._lock = threading.Lock()
        #: pod name -> its ConfigMap's name and latest body
        self._maps: dict[str, tuple[str, Mapping[str, Any]]] = {}
        #: the pods with a deletionTimestamp: they got their SIGTERM
        self._stopping: set[str] = set()
        self.acknowledged = 0
        self.released_on_shutdown = 0

    def on_map(self, event_type: str, body: Mapping[str, Any]) -> None:
        pod = podassignments.parse_data(body.get("data") or {}).pod
        name = (body.get("metadata") or {}).get("name", "")
        with self._lock:
            if event_type == "DELETED":
                self._maps.pop(pod, None)
                return
            self._maps[pod] = (name, body)
            stopping = pod in self._stopping
        self._answer(name, body, stopping=stopping)

    def on_pod(self, event_type: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        pod = meta.get("name", "")
        with self._lock:
            if event_type == "DELETED":
                self._stopping.discard(pod)
                return
            if not meta.get("deletionTimestamp") or pod in self._stopping:
                return
            self._stopping.add(pod)
            known = self._maps.get(pod)
        if known is not None:
            self._answer(*known, stopping=True)

    def _answer(self, name: str, body: Mapping[str, Any], *, stopping: bool) -> None:
        if stopping:
            annotations = shutdown_release(body)
            if annotations is not None:
                self.released_on_shutdown += 1
        else:
            annotations = acknowledgement(body)
            if annotations is not None:
                self.acknowledged += 1
        if annotations is not None:
            self._write(name, annotations)


def serve(
    kubeconfig: Path,
    namespace: str,
    stdin: IO[str],
    *,
    answer: Callable[[IO[str], Callable[[], dict[str, Any]]], None],
) -> None:
    """Run the doubles until stdin closes; ``answer`` says ready and answers ``stats``."""
    api = watching.client(kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    stopped = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(ACK_WORKERS, thread_name_prefix="ack")

    def patch(name: str, annotations: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):  # gone or changed meanwhile: its next event retries
            core.patch_namespaced_config_map(
                name,
                namespace,
                {"metadata": {"annotations": annotations}},
                _preload_content=False,
            )

    def submit(name: str, annotations: dict[str, Any]) -> None:
        pool.submit(patch, name, annotations)

    doubles = Doubles(submit)
    watchers = [
        threading.Thread(
            target=watch, args=(api, namespace, stopped, on_body), daemon=True, name=what
        )
        for watch, on_body, what in (
            (watching.watch_configmaps, doubles.on_map, "maps"),
            (watching.watch_pods, doubles.on_pod, "pods"),
        )
    ]
    for watcher in watchers:
        watcher.start()
    answer(
        stdin,
        lambda: {
            "acknowledged": doubles.acknowledged,
            "released_on_shutdown": doubles.released_on_shutdown,
        },
    )
    stopped.set()
    pool.shutdown(wait=False, cancel_futures=True)
