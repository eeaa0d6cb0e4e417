"""The control plane's three processes: etcd, kube-apiserver and kube-controller-manager.

Each runs as a child process in a session of its own, with its output in a log file of the
control plane's folder, and is stopped by its pid: SIGTERM, then SIGKILL after a bound. The
flags are the ones controller-runtime's envtest starts a test control plane with, plus what
the operator's claims need: RBAC, the admission chain with ValidatingAdmissionPolicy (on by
default since 1.30), a service-account issuer with our own signing key (TokenRequest), and the
controllers that make Deployments into pods and collect what a deleted owner leaves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import IO

from eventhub_balancer import errors
from eventhub_balancer_devstack import parentdeaths
from eventhub_balancer_devstack.realkube import certificates

logger = logging.getLogger(__name__)

#: The repository root: this file is devstack/eventhub_balancer_devstack/realkube/processes.py.
REPOSITORY = Path(__file__).resolve().parents[3]

#: Where `make controlplane` (devstack/controlplane/build.sh) puts the binaries;
#: ``EHB_CONTROLPLANE_BIN`` points elsewhere (a folder with the same three files).
DEFAULT_BIN = REPOSITORY / "devstack" / "controlplane" / "bin"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")

#: How long a SIGTERM may take before SIGKILL: etcd and the API server flush and close
#: connections within a second or two; 10 s covers a loaded 2-core machine.
STOP_TIMEOUT_S = 10.0

#: The cluster's service range: nothing routes to it here, but the API server needs one and
#: takes its first address for the ``kubernetes`` Service.
SERVICE_CIDR = "10.96.0.0/24"

#: The controllers the local stack needs of kube-controller-manager: Deployments make
#: ReplicaSets make Pods, deleted owners' dependents are collected, deleted namespaces are
#: emptied, every namespace gets its ``default`` ServiceAccount, and a node that stops renewing
#: its Lease is noticed (the local kubelet keeps renewing, so its pods are never evicted),
#: admission policies' CEL is type-checked into their status, and the built-in view, edit and
#: admin roles gather the ClusterRoles labelled for them (the charts' aggregated roles).
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "deployment-controller",
    "replicaset-controller",
    "serviceaccount-controller",
    "node-lifecycle-controller",
    "validatingadmissionpolicy-status-controller",
    "clusterrole-aggregation-controller",
)


class MissingBinaries(errors.ConfigurationError):
    """The control plane has not been built on this machine."""


def binaries_folder() -> Path:
    return Path(os.environ.get("EHB_CONTROLPLANE_BIN") or DEFAULT_BIN)


def find_binaries() -> dict[str, Path]:
    """The three binaries, or `MissingBinaries` with the command that builds them."""
    folder = binaries_folder()
    found = {name: folder / name for name in BINARIES}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        raise MissingBinaries(
            f"the real control plane is not built ({', '.join(missing)} missing in {folder}): "
            "run `make controlplane`"
        )
    return found


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the caller tolerates a bind race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def claim_port(port: int, *, flag: str) -> int:
    """``port``, or a free one for 0; a taken port is one clear error naming ``flag``."""
    if port == 0:
        return free_port()
    if not port_is_free(port):
        raise errors.ConfigurationError(
            f"port {port} on 127.0.0.1 is taken: choose another with {flag}, or 0 for a free one"
        )
    return port


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int


def etcd_args(binary: Path, *, data: Path, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=ehb-local",
        f"--data-dir={data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=ehb-local={peer}",
        # A throwaway store in a temporary folder: no fsync (as envtest runs it).
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_args(
    binary: Path,
    *,
    folder: Path,
    ports: Ports,
    credentials: certificates.ControlPlaneCredentials,
) -> list[str]:
    url = f"https://127.0.0.1:{ports.apiserver}"
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--cert-dir={folder}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={credentials.serving_certificate}",
        f"--tls-private-key-file={credentials.serving_key}",
        f"--client-ca-file={credentials.ca_certificate}",
        # ``kubectl logs`` is proxied to the node's log server (`nodelogs`), at the node's
        # InternalIP: its Hostname, the default first choice, resolves nowhere.
        f"--kubelet-client-certificate={credentials.kubelet_client.certificate}",
        f"--kubelet-client-key={credentials.kubelet_client.key}",
        f"--kubelet-certificate-authority={credentials.ca_certificate}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={url}",
        f"--service-account-key-file={credentials.service_account_public_key}",
        f"--service-account-signing-key-file={credentials.service_account_signing_key}",
        "--allow-privileged=true",
        # No Endpoints to keep for the `kubernetes` Service: nothing here dials it.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_args(binary: Path, *, kubeconfig: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--controllers={','.join(CONTROLLERS)}",
        # One control plane, no rival: waiting for a leader lease only delays the start.
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        "--profiling=false",
        "--v=1",
    ]


class ChildProcess:
    """One binary, started in its own session, its output in ``log``, stopped by pid."""

    def __init__(self, name: str, args: list[str], *, log: Path) -> None:
        self.name = name
        self.args = args
        self.log_path = log
        self._log: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=parentdeaths.die_with_parent,
        )
        logger.debug("%s started (pid %d)", self.name, self._process.pid)

    def exited(self) -> int | None:
        """The exit code if the process has ended, else None."""
        return None if self._process is None else self._process.poll()

    def tail(self, lines: int = 5) -> str:
        """The last lines of its log, for an error message."""
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            return "\n".join(text.strip().splitlines()[-lines:])
        return ""

    def terminate(self, signum: int = signal.SIGTERM) -> None:
        """SIGTERM (or ``signum``), without waiting (`stop` waits)."""
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signum)

    def stop(self, timeout: float = STOP_TIMEOUT_S, *, signum: int = signal.SIGTERM) -> None:
        """``signum`` (SIGTERM), then SIGKILL if it has not ended within ``timeout``."""
        process = self._process
        self.terminate(signum)
        self._process = None
        if process is not None and process.poll() is None:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop within %g s: killing it", self.name, timeout)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait(timeout=timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
