"""This machine as a node of the real control plane: a kubelet for process-backed pods.

With the real control plane, pods come from where they come from on a cluster: Deployments
through the real kube-controller-manager's ReplicaSets, or ``kubectl``. There is no scheduler
and no kubelet, so `LocalNode` is both, as far as the local stack needs:

- it registers a Node and keeps it Ready by renewing its Lease in ``kube-node-lease`` (as a
  kubelet does every 10 s), so that the node lifecycle controller never evicts its pods;
- it binds each pending pod to itself through the ``binding`` subresource (the scheduler's
  part, on a watch of its own, as the scheduler is a process of its own: a pod is bound
  within moments of its creation, never behind the start of another pod), and runs each pod
  bound to it as a process (`deployments.pod_template` reads the
  container's args, environment, readiness probe and grace period from the pod);
- it reports the pod's status (Running, Ready from the readiness probe, restarts after a
  crash: one probe round per pod is `runningpods.check`) and, on deletion, sends SIGTERM,
  waits the pod's grace period, sends SIGKILL, then deletes the Pod object with a grace
  period of 0, which is how a kubelet tells the API server that the containers are gone.
  Finalizers of others keep the object as on a cluster.

Each pod gets a token bound to it (TokenRequest with the pod as the bound object), mounted
where a kubelet mounts it, with the API server in ``KUBERNETES_SERVICE_HOST`` and
``KUBERNETES_SERVICE_PORT`` (`accountmounts`): the pods load the in-cluster configuration, as
on a cluster, and their own ServiceAccount is who they are. Where a mount namespace cannot be
made (not root), a kubeconfig with the same token stands in, and the node says so.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack import deployments, podprocesses
from eventhub_balancer_devstack.kube import identities
from eventhub_balancer_devstack.realkube import (
    accountmounts,
    controlplanes,
    nodeleases,
    nodelogs,
    podstatuses,
    podwatches,
    refusals,
    runningpods,
    secretvolumes,
)

logger = logging.getLogger(__name__)

#: The node's name, as `kubectl get nodes` shows it.
NODE_NAME = "ehb-local-node"

#: How often processes are checked and readiness probed: fast enough that the operator sees a
#: death or a readiness change well inside one cycle.
PROBE_INTERVAL_S = 0.2


class LocalNode:
    """Binds, runs, probes and stops the control plane's pods on this machine.

    ``images`` says what each container image runs here (`deployments.LocalImage`); a pod whose
    image is not among them stays Pending with a waiting reason that says so.
    """

    def __init__(
        self,
        control_plane: controlplanes.RealControlPlane,
        *,
        images: Mapping[str, deployments.LocalImage],
        state_dir: Path,
        name: str = NODE_NAME,
        node_env: Mapping[str, str] | None = None,
    ) -> None:
        self._plane = control_plane
        self._calls = control_plane.calls
        self._images = dict(images)
        self._state = state_dir
        self._name = name
        self._node_env = dict(node_env or {})
        self._lock = threading.RLock()
        self._pods: dict[str, runningpods.RunningPod] = {}
        self._refused = refusals.Refusals()
        self._volumes = secretvolumes.SecretVolumes(self._secret_value, state_dir)
        self._stop = threading.Event()
        #: Why pods get a kubeconfig instead of a mounted ServiceAccount (None: they do not).
        self.unmountable: str | None = None
        self._watch = podwatches.PodWatch(self._calls, self._on_change)
        self._scheduler = podwatches.PodWatch(self._calls, self._schedule, name="scheduler")
        self._logs: nodelogs.LogServer | None = None
        self._threads = [
            threading.Thread(target=self._heartbeats, name="local-node lease", daemon=True),
            threading.Thread(target=self._probing, name="local-node probes", daemon=True),
        ]

    @property
    def name(self) -> str:
        return self._name

    @property
    def log_dir(self) -> Path:
        """Where each pod's output goes (``NAME.log``), what ``kubectl logs`` shows (`nodelogs`)."""
        return self._state / "logs"

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> LocalNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._state.mkdir(parents=True, exist_ok=True)
        self.unmountable = accountmounts.unavailable()
        if self.unmountable is not None:
            logger.warning(
                "pods get a kubeconfig, not a mounted ServiceAccount: %s", self.unmountable
            )
        self._logs = nodelogs.LogServer.started(
            self._name,
            self.log_dir,
            ca_certificate=self._plane.ca_certificate,
            holds=self._holds,
            ports=self.port,
        )
        nodeleases.register(self._calls, self._name, logs_port=self._logs.port)
        nodeleases.renew_lease(self._calls, self._name)
        for thread in self._threads:
            thread.start()
        self._scheduler.start()
        self._watch.start()

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Stop every process (SIGTERM, SIGKILL after ``grace_s``); the objects stay, as
        when a node goes down."""
        self._stop.set()
        for watch in (self._scheduler, self._watch):
            watch.halt()
        for watch in (self._scheduler, self._watch):
            watch.join()
        for thread in self._threads:
            thread.join(timeout=runningpods.PROBE_TIMEOUT_S + 5)
        if self._logs is not None:
            self._logs.stop()
        with self._lock:
            pods = list(self._pods.values())
        for pod in pods:
            if pod.process.poll() is None:
                pod.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for pod in pods:
            try:
                pod.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pod.process.kill()
                pod.process.wait(timeout=5)

    # -- queries ------------------------------------------------------------------------------

    def image_for(self, reference: str) -> deployments.LocalImage:
        """What ``reference`` runs here: its exact entry in ``images``, else its repository's
        (``registry/name:tag`` or ``name@sha256:...`` -> ``name``, with or without the
        registry), else `UnrunnableSpec` naming the images this node has."""
        if reference in self._images:
            return self._images[reference]
        repository = reference.split("@", 1)[0]
        if ":" in repository.rsplit("/", 1)[-1]:
            repository = repository.rsplit(":", 1)[0]
        for candidate in (repository, repository.rsplit("/", 1)[-1]):
            if candidate in self._images:
                return self._images[candidate]
        raise deployments.UnrunnableSpec(
            f"containers[0].image: this node runs only {', '.join(sorted(self._images))}, "
            f"not {reference}"
        )

    def running(self) -> dict[str, int]:
        """``namespace/name`` -> pid of every pod process this node runs."""
        with self._lock:
            return {
                f"{p.namespace}/{p.name}": p.process.pid
                for p in self._pods.values()
                if not p.gone and p.process.poll() is None
            }

    def _holds(self, namespace: str, name: str) -> bool | None:
        """`nodelogs.Holds`: whether the pod's process runs; None: the pod is not here."""
        with self._lock:
            pods = [p for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)]
        return any(p.process.poll() is None for p in pods) if pods else None

    def port(self, namespace: str, name: str) -> int | None:
        """`nodelogs.Ports`: the pod's port (its ``--port``), None when it is not here."""
        with self._lock:
            ports = [
                p.port for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)
            ]
        return ports[0] if ports else None

    def kill(self, namespace: str, name: str) -> None:
        """SIGKILL the pod's process, as an OOM kill would; it restarts (restartPolicy Always)."""
        with self._lock:
            pods = [p for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)]
        for pod in pods:
            pod.process.kill()
            pod.process.wait(timeout=10)

    # -- the Node and its Lease ---------------------------------------------------------------

    def _heartbeats(self) -> None:
        assert self._logs is not None
        port, last_status = self._logs.port, time.monotonic()
        while not self._stop.wait(nodeleases.LEASE_RENEW_S):
            try:
                nodeleases.renew_lease(self._calls, self._name)
                if time.monotonic() - last_status >= nodeleases.STATUS_REPORT_S:
                    nodeleases.report_status(self._calls, self._name, logs_port=port)
                    last_status = time.monotonic()
            except Exception as e:  # the API away: the next beat tries again
                logger.warning("node heartbeat failed: %r", e)

    # -- pods: the watch's side ---------------------------------------------------------------

    def _schedule(self, kind: str, pod: dict[str, Any]) -> None:
        """The scheduler's part: bind each pending pod that is not being deleted."""
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        if kind != "DELETED" and not spec.get("nodeName") and not metadata.get("deletionTimestamp"):
            self._bind(pod)

    def _on_change(self, kind: str, pod: dict[str, Any]) -> None:
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        uid = metadata["uid"]
        if kind == "DELETED":
            self._forget(uid, pod)
            return
        if spec.get("nodeName") != self._name:
            return  # another node's, or not bound yet: the scheduler's watch binds it
        with self._lock:
            known = self._pods.get(uid)
        if metadata.get("deletionTimestamp"):
            if known is not None:
                self._terminate(known, pod)
            else:  # none of its containers runs (refused, say): gone now; the next list retries
                self._refused.forget(uid)
                podstatuses.confirm_deleted(self._calls, metadata, stopping=self._stop, tries=1)
            return
        if known is None and uid not in self._refused:
            self._run(pod)
        self._refused.seen(pod)

    def _bind(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        try:
            self._calls.call(
                "POST",
                f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}/binding",
                body={
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": metadata["name"], "uid": metadata["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": self._name},
                },
            )
            logger.info("bound %s/%s to %s", metadata["namespace"], metadata["name"], self._name)
        except ApiException as e:
            if e.status not in (404, 409):
                logger.warning("binding %s failed: %s", metadata["name"], e.reason)

    def _secret_value(self, namespace: str) -> Any:
        def value(secret: str, key: str) -> str:
            body = self._calls.get("v1/secrets", secret, namespace=namespace)
            return deployments.secret_key(body, namespace=namespace, secret=secret, key=key)

        return value

    def _run(self, pod: dict[str, Any]) -> None:
        metadata, spec = pod["metadata"], pod["spec"]
        namespace, name, uid = metadata["namespace"], metadata["name"], metadata["uid"]
        container = spec["containers"][0]
        identity = identities.PodIdentity(
            namespace=namespace,
            service_account=spec.get("serviceAccountName") or "default",
            pod_name=name,
            pod_uid=uid,
        )
        try:
            folder = self._state / namespace / name
            if self.unmountable is None:
                account = accountmounts.write(
                    folder / "serviceaccount",
                    token=self._plane.pod_token(identity),
                    ca_certificate=self._plane.ca_certificate,
                    namespace=namespace,
                )
                credentials = accountmounts.environment(self._plane.url)
            else:
                kubeconfig = self._plane.write_kubeconfig(
                    folder / "kubeconfig", namespace=namespace, identity=identity
                )
                credentials = {"KUBECONFIG": str(kubeconfig)}
            template = deployments.pod_template(
                {
                    "metadata": {"name": name},
                    "spec": {"template": {"metadata": metadata, "spec": spec}},
                },
                images={container.get("image", ""): self.image_for(container.get("image", ""))},
                secret_value=self._secret_value(namespace),
                node_env={**self._node_env, **credentials},
                log_dir=self.log_dir,
                volume_dir=folder / "volumes",
            )
            if self.unmountable is None:
                template = dataclasses.replace(
                    template,
                    launcher=accountmounts.launcher(account),
                    unset=accountmounts.NOT_INHERITED,
                )
        except (deployments.UnrunnableSpec, ApiException) as e:
            # A Secret not there yet, or the API away: tried again, as a kubelet does.
            again = isinstance(e, ApiException | deployments.MissingSecret)
            if self._refused.refuse(pod, why=str(e), again=again):
                podstatuses.refuse(self._calls, pod, str(e))
            return
        port = podprocesses.free_port()
        process = podprocesses.spawn(template, name=name, namespace=namespace, uid=uid, port=port)
        running = runningpods.RunningPod(
            namespace=namespace,
            name=name,
            uid=uid,
            container=container["name"],
            image=container.get("image", ""),
            port=port,
            template=template,
            process=process,
            started_at=nodeleases.now(),
            spec=spec,
        )
        with self._lock:
            self._pods[uid] = running
        logger.info("pod %s/%s started as pid %d (port %d)", namespace, name, process.pid, port)
        runningpods.write_status(self._calls, running)

    def _terminate(self, pod: runningpods.RunningPod, body: dict[str, Any]) -> None:
        with self._lock:
            if pod.deleting:
                return
            pod.deleting = True
        grace = body["metadata"].get("deletionGracePeriodSeconds")
        grace_s = float(grace if grace is not None else pod.template.termination_grace_s)
        if pod.process.poll() is None:
            pod.process.send_signal(signal.SIGTERM)
        threading.Thread(
            target=self._reap, args=(pod, grace_s), name=f"reap {pod.name}", daemon=True
        ).start()

    def _reap(self, pod: runningpods.RunningPod, grace_s: float) -> None:
        try:
            pod.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("pod %s ignored SIGTERM for its grace period: SIGKILL", pod.name)
            pod.process.kill()
            pod.process.wait(timeout=10)
        metadata = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
        podstatuses.confirm_deleted(self._calls, metadata, stopping=self._stop)

    def _forget(self, uid: str, body: dict[str, Any]) -> None:
        self._refused.forget(uid)
        with self._lock:
            pod = self._pods.pop(uid, None)
        if pod is None:
            return
        pod.gone = True
        if pod.process.poll() is None:  # deleted with grace 0 by someone else: stop at once
            pod.process.kill()
            pod.process.wait(timeout=10)

    # -- pods: the probes' side ---------------------------------------------------------------

    def _probing(self) -> None:
        while not self._stop.wait(PROBE_INTERVAL_S):
            for refused in self._refused.due():
                self._run(refused)
            with self._lock:
                pods = [p for p in self._pods.values() if not p.gone and not p.deleting]
            self._volumes.sync(pods)
            for pod in pods:
                try:
                    runningpods.check(self._calls, pod)
                except Exception as e:  # the API away: the next round writes it again
                    logger.warning("pod %s: status update failed: %r", pod.name, e)
