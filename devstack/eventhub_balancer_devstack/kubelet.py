"""Consumer "pods" as local processes: the kubelet the local stack does not have.

The demo, the end-to-end tests and the side-by-side benchmark need what a cluster gives a
consumer Deployment: Pod objects whose status follows real processes (Running, Ready from a
readiness probe, NotReady when the process dies), graceful deletion (deletionTimestamp,
SIGTERM, the grace period, then SIGKILL) and restarts after a crash. This module does that
against any Kubernetes API server (the local one in practice) through the official client,
with one process per pod.

A finalizer of ours holds each Pod object until its process has exited, as the real kubelet
holds a terminating pod, so that the operator sees `deletionTimestamp` first and the pod
disappear only after the consumer released its partitions.

What a pod runs and how its process is started (`PodTemplate`) are in `podprocesses`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from eventhub_balancer import runners
from eventhub_balancer_devstack import podprocesses
from eventhub_balancer_devstack.podprocesses import DOWNWARD_FIELDS as DOWNWARD_FIELDS
from eventhub_balancer_devstack.podprocesses import PodTemplate as PodTemplate
from eventhub_balancer_devstack.podprocesses import free_port as free_port
from eventhub_balancer_devstack.podprocesses import spawn
from eventhub_balancer_devstack.realkube.runningpods import exited

logger = logging.getLogger(__name__)

#: Holds a Pod object after its deletion until our process for it has exited.
FINALIZER = "eventhub-balancer.dev/local-kubelet"

#: How often process state and readiness are polled: fast enough that the operator sees a
#: death or a readiness change well inside one cycle.
PROBE_INTERVAL_S = 0.2

#: A readiness probe slower than this counts as a failure, as with a kubelet's timeoutSeconds.
PROBE_TIMEOUT_S = 3.0

#: Failed probes in a row before a Ready pod turns NotReady (a kubelet's failureThreshold):
#: one slow answer from a busy consumer on a loaded machine must not move its partitions.
FAILURE_THRESHOLD = 3

#: The longest wait for the API in any single call, so that nothing here hangs.
API_TIMEOUT_S = 10

#: The longest wait for the probe loop to end on stop (a round of probes in flight finishes).
PROBE_STOP_S = 5.0


@dataclasses.dataclass
class _Pod:
    name: str
    uid: str
    port: int
    process: subprocess.Popen[bytes]
    ready: bool = False
    failures: int = 0
    restarts: int = 0
    deleting: bool = False
    gone: bool = False
    log: Any = None
    #: When its process started, and how the one before it ended (a kubelet's
    #: ``lastState.terminated``; None: it has not): the operator tells a restart by it.
    started_at: str = ""
    last_exit: dict[str, Any] | None = None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LocalKubelet:
    """Creates, probes, restarts and deletes process-backed pods of one workload.

    The API calls run on the caller's thread (create, delete) and on the probe loop's
    thread, each with the sync client and a bounded timeout.
    """

    def __init__(
        self,
        *,
        api_client: k8s.ApiClient,
        namespace: str,
        template: PodTemplate,
    ) -> None:
        self._core = k8s.CoreV1Api(api_client)
        self._namespace = namespace
        self._template = template
        self._pods: dict[str, _Pod] = {}
        self._lock = threading.RLock()
        self._probing = runners.BackgroundLoop(name="local-kubelet", timeout=PROBE_STOP_S)

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> LocalKubelet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._probing.start()
        self._probing.submit(self._probe_loop())

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Delete every pod gracefully (SIGTERM, then SIGKILL after ``grace_s``)."""
        for name in self.names():
            with contextlib.suppress(ApiException):
                self.delete(name, wait_s=0)
        deadline = time.monotonic() + grace_s
        with self._lock:
            pods = list(self._pods.values())
        for pod in pods:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                pod.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                pod.process.kill()
                pod.process.wait(timeout=5)
        try:
            self._probing.stop()
        except TimeoutError:
            logger.warning("the probe loop did not stop within %g s", PROBE_STOP_S)
        for pod in pods:
            self._finish(pod)

    # -- queries ---------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The pods that exist and are not being deleted, oldest first."""
        with self._lock:
            return [p.name for p in self._pods.values() if not p.deleting and not p.gone]

    def port(self, name: str) -> int:
        with self._lock:
            return self._pods[name].port

    def pid(self, name: str) -> int:
        with self._lock:
            return self._pods[name].process.pid

    def is_ready(self, name: str) -> bool:
        with self._lock:
            return self._pods[name].ready

    def wait_ready(self, names: Sequence[str] | None = None, *, timeout_s: float = 60.0) -> None:
        """Wait until the named pods (all current ones by default) are Ready."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            wanted = list(names) if names is not None else self.names()
            with self._lock:
                if all(self._pods[n].ready for n in wanted):
                    return
            time.sleep(PROBE_INTERVAL_S)
        raise TimeoutError(f"pods not ready after {timeout_s:.0f} s: {self._not_ready()}")

    def _not_ready(self) -> list[str]:
        with self._lock:
            return [p.name for p in self._pods.values() if not p.ready and not p.gone]

    # -- operations ------------------------------------------------------------------------

    def scale(self, replicas: int) -> list[str]:
        """Create or delete pods (newest first, as a ReplicaSet does) to reach ``replicas``.

        Returns the names created or deleted.
        """
        current = self.names()
        changed: list[str] = []
        while len(current) < replicas:
            name = self.create()
            current.append(name)
            changed.append(name)
        # As a ReplicaSet's controller does, every surplus Pod is deleted at once (its deletes
        # go out together), and each kubelet then stops its container: one pod's SIGTERM does
        # not wait for the next pod's deletion.
        leaving = list(reversed(current[replicas:]))
        if leaving:
            with concurrent.futures.ThreadPoolExecutor(len(leaving), "delete") as deleting:
                # .result() raises a deletion's failure here, as a sequential delete would.
                for done in [deleting.submit(self._delete_object, n) for n in leaving]:
                    done.result()
        for name in leaving:
            self._terminate(name)
            changed.append(name)
        return changed

    def create(self) -> str:
        body: Any = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{self._template.name_prefix}-",
                "labels": dict(self._template.labels),
                "finalizers": [FINALIZER],
            },
            "spec": {
                "containers": [{"name": "consumer", "image": "local/eventhub-balancer"}],
                "terminationGracePeriodSeconds": int(self._template.termination_grace_s),
            },
        }
        created = self._core.create_namespaced_pod(
            self._namespace, body, _request_timeout=API_TIMEOUT_S
        )
        name: str = created.metadata.name  # type: ignore[union-attr,assignment]
        uid: str = created.metadata.uid or ""  # type: ignore[union-attr]
        port = free_port()
        process = spawn(self._template, name=name, namespace=self._namespace, uid=uid, port=port)
        pod = _Pod(name=name, uid=uid, port=port, process=process, started_at=_now())
        with self._lock:
            self._pods[name] = pod
        self._patch_status(pod, phase="Running", ready=False)
        logger.info("pod %s started as pid %d (port %d)", name, pod.process.pid, port)
        return name

    def delete(self, name: str, *, wait_s: float = 0.0) -> None:
        """Delete a pod as Kubernetes does: deletionTimestamp at once, SIGTERM, grace, SIGKILL.

        With ``wait_s`` > 0, wait that long for the Pod object to disappear.
        """
        self._delete_object(name)
        pod = self._terminate(name)
        if wait_s > 0:
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and not pod.gone:
                time.sleep(PROBE_INTERVAL_S / 2)

    def _delete_object(self, name: str) -> None:
        """The API's side of a deletion: the Pod gets its deletionTimestamp (our finalizer
        holds it until the process is gone)."""
        with self._lock:
            self._pods[name].deleting = True
        self._core.delete_namespaced_pod(name, self._namespace, _request_timeout=API_TIMEOUT_S)

    def _terminate(self, name: str) -> _Pod:
        """The kubelet's side: SIGTERM, then the grace period and SIGKILL (`_reap`)."""
        with self._lock:
            pod = self._pods[name]
        if pod.process.poll() is None:
            pod.process.send_signal(signal.SIGTERM)
        threading.Thread(target=self._reap, args=(pod,), name=f"reap-{name}", daemon=True).start()
        return pod

    def kill(self, name: str) -> None:
        """SIGKILL the pod's process, as an OOM kill or a crash would.

        As with restartPolicy Always, the probe loop starts the process again in the same
        pod, which stays NotReady until its readiness probe passes.
        """
        with self._lock:
            pod = self._pods[name]
        pod.process.kill()
        pod.process.wait(timeout=10)

    def restarts(self, name: str) -> int:
        with self._lock:
            return self._pods[name].restarts

    # -- internals -------------------------------------------------------------------------

    def _restart(self, pod: _Pod) -> None:
        with self._lock:
            if pod.deleting:
                return
            pod.restarts += 1
            ended = pod.process.poll()
            if ended is not None:
                pod.last_exit = exited(ended, started_at=pod.started_at)
            pod.started_at = _now()
            pod.process = spawn(
                self._template,
                name=pod.name,
                namespace=self._namespace,
                uid=pod.uid,
                port=pod.port,
            )
        logger.info("pod %s restarted (%d) as pid %d", pod.name, pod.restarts, pod.process.pid)

    def _reap(self, pod: _Pod) -> None:
        try:
            pod.process.wait(timeout=self._template.termination_grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("pod %s ignored SIGTERM for its grace period: SIGKILL", pod.name)
            pod.process.kill()
            pod.process.wait(timeout=10)
        self._finish(pod)

    def _finish(self, pod: _Pod) -> None:
        """Release our finalizer so that the API server removes the Pod object."""
        if pod.gone:
            return
        patch = {"metadata": {"finalizers": None}}
        try:
            self._core.patch_namespaced_pod(
                pod.name, self._namespace, patch, _request_timeout=API_TIMEOUT_S
            )
        except ApiException:
            pass  # the Pod gone already, or the API refusing: the process is gone either way
        except (urllib3.exceptions.HTTPError, OSError) as e:
            # The API stopped before the reaper ended (a stack shutting down): this thread's
            # traceback went to stderr, and pytest took it for a test's fault.
            logger.info("pod %s: its finalizer stays (the API is away: %s)", pod.name, e)
        pod.gone = True
        with self._lock:
            self._pods.pop(pod.name, None)

    def _probe(self, pod: _Pod) -> bool:
        if pod.process.poll() is not None:
            return False
        return podprocesses.probe(self._template, pod.port, timeout=PROBE_TIMEOUT_S)

    async def _probe_loop(self) -> None:
        # The probes and API calls block: this loop's thread is theirs alone, and stop()
        # cancels the loop between two rounds.
        while True:
            await asyncio.sleep(PROBE_INTERVAL_S)
            self._probe_round()

    def _probe_round(self) -> None:
        with self._lock:
            pods = [p for p in self._pods.values() if not p.gone]
        for pod in pods:
            if pod.process.poll() is not None and not pod.deleting:
                self._restart(pod)
                pod.failures = FAILURE_THRESHOLD  # a dead container is NotReady at once
            ready = self._probe(pod) and not pod.deleting
            if ready:
                pod.failures = 0
            elif pod.ready and pod.process.poll() is None and not pod.deleting:
                pod.failures += 1
                if pod.failures < FAILURE_THRESHOLD:
                    continue
            if ready != pod.ready:
                try:
                    self._patch_status(pod, phase="Running", ready=ready)
                except ApiException as e:
                    if e.status != 404:
                        logger.warning("pod %s: status update failed: %s", pod.name, e)
                        continue  # not recorded: the next round writes it again
                except (urllib3.exceptions.HTTPError, OSError) as e:
                    # The API is away (paused, restarting): keep probing, write it later.
                    logger.warning("pod %s: status update failed: %s", pod.name, e)
                    continue
                pod.ready = ready

    def _patch_status(self, pod: _Pod, *, phase: str, ready: bool) -> None:
        status = "True" if ready else "False"
        now = _now()
        body = {
            "status": {
                "phase": phase,
                "podIP": "127.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": status, "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
                ],
                "containerStatuses": [
                    {
                        "name": "consumer",
                        "ready": ready,
                        "restartCount": pod.restarts,
                        "image": "local/eventhub-balancer",
                        "imageID": "",
                        "state": {"running": {"startedAt": pod.started_at or now}},
                        "lastState": {"terminated": dict(pod.last_exit)} if pod.last_exit else {},
                    }
                ],
            }
        }
        self._core.patch_namespaced_pod_status(
            pod.name, self._namespace, body, _request_timeout=API_TIMEOUT_S
        )
