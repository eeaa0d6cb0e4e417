"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

The reference the local API (`kube.LocalKubeAPI`) is checked against, and a second server
for every scenario, benchmark and the demo (``--kube real``). It is started as
controller-runtime's envtest starts one, from binaries built by ``make controlplane``, with
fresh keys (`certificates`) in a temporary folder that `stop` removes. It offers what the
harness uses of the local API (``url``, ``write_kubeconfig``, and from `objectcalls.ObjectCalls`
``create_object`` & co. and the write record), over HTTPS as the administrator; what only the
local API can do on demand (pausing, injected watch faults) it has not, and callers check
`supports_faults`.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from kubernetes.client.exceptions import ApiException

from eventhub_balancer import errors
from eventhub_balancer_devstack.kube import identities, resources
from eventhub_balancer_devstack.realkube import (
    certificates,
    etcdcalls,
    objectcalls,
    processes,
    resourcecalls,
    tokens,
    writerecords,
)

logger = logging.getLogger(__name__)

#: Starts made in all when a port chosen free is taken before a server binds it.
PORT_TRIES = 3

#: The repository's crds/, installed at start as the local API installs them.
REPOSITORY_CRDS: Path | None = (
    processes.REPOSITORY / "crds" if (processes.REPOSITORY / "crds").is_dir() else None
)

#: From the first process to a ready API server with its controllers: about 6-10 s on an idle
#: 2-core machine; a loaded one (a test suite beside it) takes longer.
START_TIMEOUT_S = 120.0

#: Where CRDs are served.
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"

#: How often a start polls what it waits for.
POLL_S = 0.2


class RealControlPlane(objectcalls.ObjectCalls):
    """etcd, kube-apiserver and kube-controller-manager as child processes on 127.0.0.1.

    ``start()``/``stop()`` or ``with RealControlPlane() as kube:``. ``port=0`` picks a free
    port for the API server; etcd and the controller manager always get free ones.
    """

    #: The local API injects watch faults and pauses; a real server does neither on demand.
    supports_faults = False
    kind = "real"

    def __init__(
        self,
        *,
        port: int = 0,
        crds_dir: Path | None = REPOSITORY_CRDS,
        start_timeout: float = START_TIMEOUT_S,
        folder: Path | None = None,
        apiserver_flags: Sequence[str] = (),
    ) -> None:
        """``apiserver_flags``: more kube-apiserver flags (a test that needs a setting)."""
        self._port = port
        self._apiserver_flags = tuple(apiserver_flags)
        self._crds_dir = crds_dir
        self._start_timeout = start_timeout
        self._given_folder = folder
        self._folder: Path | None = None
        self._processes: list[processes.ChildProcess] = []
        self._credentials: certificates.ControlPlaneCredentials | None = None
        self._url: str | None = None
        self._calls: resourcecalls.ResourceCalls | None = None
        self._record: writerecords.WatchWriteRecord | None = None
        self._ports: processes.Ports | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the control plane is not running: call start() first")
        return self._url

    @property
    def folder(self) -> Path:
        """Its keys, logs and etcd's data (removed by `stop`)."""
        if self._folder is None:
            raise RuntimeError("the control plane is not running: call start() first")
        return self._folder

    @property
    def ca_certificate(self) -> Path:
        """The cluster's CA certificate (PEM), as a pod finds it in its ServiceAccount mount."""
        if self._credentials is None:
            raise RuntimeError("the control plane is not running: call start() first")
        return self._credentials.ca_certificate

    @property
    def pids(self) -> dict[str, int]:
        return {p.name: p.pid for p in self._processes if p.pid is not None}

    def start(self) -> Self:
        """Start etcd, kube-apiserver and kube-controller-manager. A port chosen free can be
        taken by another process before the server binds it (tests and stacks beside this one
        choose ports too): such a start is made again on other ports, up to `PORT_TRIES` times.
        """
        for attempt in range(1, PORT_TRIES + 1):
            try:
                return self._start_once()
            except errors.ConfigurationError as e:
                if "address already in use" not in str(e) or attempt == PORT_TRIES:
                    raise
                logger.warning("a port was taken while the control plane started: again")
        raise AssertionError("unreachable")

    def _start_once(self) -> Self:
        if self._url is not None:
            raise RuntimeError("the control plane is already started")
        binaries = processes.find_binaries()
        ports = processes.Ports(
            apiserver=processes.claim_port(self._port, flag="--kube-port"),
            etcd_client=processes.free_port(),
            etcd_peer=processes.free_port(),
            controller_manager=processes.free_port(),
        )
        self._ports = ports
        if self._given_folder is not None:
            self._given_folder.mkdir(parents=True, exist_ok=True)
        folder = self._folder = Path(
            tempfile.mkdtemp(prefix="ehb-controlplane-", dir=self._given_folder)
        )
        deadline = time.monotonic() + self._start_timeout
        try:
            credentials = self._credentials = certificates.generate(folder / "pki")
            self._url = f"https://127.0.0.1:{ports.apiserver}"
            admin_kubeconfig = self._write_admin_kubeconfig(folder / "admin.kubeconfig")
            etcd = self._spawn(
                "etcd",
                processes.etcd_args(binaries["etcd"], data=folder / "etcd", ports=ports),
            )
            self._wait("etcd", etcd, deadline, self._etcd_healthy)
            apiserver = self._spawn(
                "kube-apiserver",
                processes.apiserver_args(
                    binaries["kube-apiserver"],
                    folder=folder,
                    ports=ports,
                    credentials=credentials,
                )
                + list(self._apiserver_flags),
            )
            self._wait("kube-apiserver", apiserver, deadline, self._apiserver_ready)
            manager = self._spawn(
                "kube-controller-manager",
                processes.controller_manager_args(
                    binaries["kube-controller-manager"], kubeconfig=admin_kubeconfig, ports=ports
                ),
            )
            self._calls = resourcecalls.ResourceCalls(
                server=self._url, ssl_context=self._ssl_context()
            )
            # Pods are refused until their namespace has its default ServiceAccount: the
            # serviceaccount controller making one is the sign the controllers run.
            self._wait(
                "kube-controller-manager",
                manager,
                deadline,
                lambda: (
                    self.get_object("v1/serviceaccounts", "default", namespace="default")
                    is not None
                ),
            )
            if self._crds_dir is not None:
                self._install_crds(self._crds_dir, deadline)
        except BaseException:
            # Nothing a graceful stop keeps: the folder, etcd's data with it, goes. A Ctrl-C
            # while kube-apiserver starts (it ignores SIGTERM until it serves) no longer waits
            # out its 10 s bound.
            self.stop(at_once=True)
            raise
        logger.info("real control plane serving at %s (%s)", self._url, folder)
        return self

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again, as a rollout of the control plane does:
        every connection and watch ends, and the new server's watch cache starts at etcd's
        current revision, so a watch resumed from before answers 410 Gone."""
        (apiserver,) = [p for p in self._processes if p.name == "kube-apiserver"]
        apiserver.stop()
        apiserver.start()
        self._wait("kube-apiserver", apiserver, time.monotonic() + self._start_timeout, self.readyz)

    def stop(self, *, at_once: bool = False) -> None:
        """Stop every process by its pid (the controllers first, etcd last); remove the folder.
        ``at_once``: SIGKILL, not SIGTERM (a start that failed or was interrupted)."""
        signum = signal.SIGKILL if at_once else signal.SIGTERM
        record, self._record = self._record, None
        if record is not None:
            record.stop()
        # All at once, so that the slowest (kube-apiserver draining its watches) bounds the
        # stop, not the sum of the three.
        for process in self._processes:
            process.terminate(signum)
        for process in reversed(self._processes):
            process.stop(signum=signum)
        self._processes = []
        if self._calls is not None:
            self._calls.close()
        self._calls = None
        self._url = None
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str]) -> processes.ChildProcess:
        process = processes.ChildProcess(name, args, log=self.folder / f"{name}.log")
        process.start()
        self._processes.append(process)
        return process

    def _wait(
        self,
        name: str,
        process: processes.ChildProcess,
        deadline: float,
        ready: Callable[[], bool],
    ) -> None:
        while True:
            code = process.exited()
            if code is not None:
                raise errors.ConfigurationError(
                    f"{name} exited with code {code} while starting; its log ends:\n"
                    f"{process.tail()}"
                )
            with contextlib.suppress(OSError, ApiException, ssl.SSLError):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise errors.ConfigurationError(
                    f"{name} was not ready within {self._start_timeout:g} s; its log ends:\n"
                    f"{process.tail()}"
                )
            time.sleep(POLL_S)

    def _ssl_context(self) -> ssl.SSLContext:
        assert self._credentials is not None
        context = ssl.create_default_context(cafile=str(self._credentials.ca_certificate))
        context.load_cert_chain(
            str(self._credentials.admin.certificate), str(self._credentials.admin.key)
        )
        return context

    def _etcd_healthy(self) -> bool:
        return etcdcalls.healthy(self._etcd_port())

    def readyz(self) -> bool:
        """The API server's own readiness (``/readyz``: etcd, the post-start hooks...)."""
        try:
            with urllib.request.urlopen(
                f"{self.url}/readyz", timeout=2, context=self._ssl_context()
            ) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError:
            return False

    def _apiserver_ready(self) -> bool:
        return self.readyz()

    def _install_crds(self, folder: Path, deadline: float) -> None:
        names = []
        for document in resources.load_crd_files(folder):
            self.calls.apply(CRDS, document)
            names.append(document["metadata"]["name"])
        for name in names:
            while not self.calls.established(name):
                if time.monotonic() > deadline:
                    raise errors.ConfigurationError(f"the CRD {name} was not Established")
                time.sleep(POLL_S)

    # -- kubeconfigs ----------------------------------------------------------------------------

    def _write_admin_kubeconfig(self, path: Path) -> Path:
        assert self._credentials is not None
        return self._write(path, namespace="default", user=self._admin_user())

    def _admin_user(self) -> dict[str, object]:
        assert self._credentials is not None
        return {
            "client-certificate": str(self._credentials.admin.certificate),
            "client-key": str(self._credentials.admin.key),
        }

    def _write(self, path: Path, *, namespace: str, user: dict[str, object]) -> Path:
        assert self._credentials is not None
        return tokens.write_kubeconfig(
            path,
            server=self.url,
            ca_certificate=self._credentials.ca_certificate,
            namespace=namespace,
            user=user,
        )

    def write_kubeconfig(
        self,
        path: Path,
        *,
        namespace: str = "default",
        identity: identities.PodIdentity | None = None,
    ) -> Path:
        """A kubeconfig for this server: the administrator's, or a pod's when ``identity``
        names one (a bound service-account token from TokenRequest, as a kubelet mounts)."""
        if identity is None:
            return self._write(Path(path), namespace=namespace, user=self._admin_user())
        token = self.pod_token(identity)
        return self._write(Path(path), namespace=namespace, user={"token": token})

    def pod_token(self, identity: identities.PodIdentity) -> str:
        """A token bound to the pod, as the kubelet asks for one (TokenRequest)."""
        return tokens.pod_token(self.calls, identity)

    def service_account_kubeconfig(
        self, path: Path, *, namespace: str, name: str, seconds: int = tokens.POD_TOKEN_SECONDS
    ) -> Path:
        """A kubeconfig that is ServiceAccount ``namespace/name`` (a TokenRequest's token):
        what a pod of that account presents, without the pod."""
        token = tokens.service_account_token(
            self.calls, namespace=namespace, name=name, seconds=seconds
        )
        return self._write(Path(path), namespace=namespace, user={"token": token})

    def client_kubeconfig(self, path: Path, *, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate for ``user`` in ``groups``: a person's."""
        assert self._credentials is not None
        client = certificates.client_certificate(
            self.folder / "pki",
            ca_certificate=self._credentials.ca_certificate,
            ca_key=certificates.ca_key_path(self._credentials),
            user=user,
            groups=groups,
        )
        return self._write(
            Path(path),
            namespace="default",
            user={"client-certificate": str(client.certificate), "client-key": str(client.key)},
        )

    # -- etcd ----------------------------------------------------------------------------------

    def _etcd_port(self) -> int:
        if self._ports is None:
            raise RuntimeError("the control plane is not running: call start() first")
        return self._ports.etcd_client

    def etcd_revision(self) -> int:
        """etcd's current revision (what the API server's resourceVersions are)."""
        return etcdcalls.revision(self._etcd_port())

    def compact(self) -> int:
        """Compact etcd's history up to now, through etcd's own API; returns the revision.

        A watch that resumes from a resourceVersion older than this, and older than what the
        API server's watch cache holds, is answered 410 Gone."""
        return etcdcalls.compact(self._etcd_port())
