"""A pod's ServiceAccount as a kubelet mounts it, so that pods load the in-cluster configuration.

On a cluster, a container finds its token, the cluster's CA and its namespace in
``/var/run/secrets/kubernetes.io/serviceaccount``, and the API server in
``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``; the Kubernetes client and kopf read
them from there. The local node gives its pods the same: each pod's process starts in a mount
namespace of its own (util-linux ``unshare``), with the pod's folder bind-mounted at that path,
so that every pod reads its own token at the one path, as on a cluster.

The local stacks used to give each pod a kubeconfig instead, and so no test loaded the
in-cluster configuration: the operator's login handed kopf the mounted token as
``bearer <token>``, and an operator installed in a cluster was refused with 401.

A mount namespace needs root (CAP_SYS_ADMIN). Without it (``ehb local up --kube real`` run as
a user), `unavailable` says why, and the node gives its pods a kubeconfig with the same token.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

#: Where a kubelet mounts a pod's ServiceAccount, and the Kubernetes client reads it.
MOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The variables a pod's in-cluster configuration is read from, besides the files.
SERVICE_HOST, SERVICE_PORT = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"
#: What a pod must not inherit from the node's own environment: with it, the client would load
#: the kubeconfig it names instead of the pod's ServiceAccount.
NOT_INHERITED = frozenset({"KUBECONFIG"})
#: The check that a mount namespace can be made here: a bound.
CHECK_TIMEOUT_S = 10.0


def unavailable() -> str | None:
    """Why pods cannot be given a mounted ServiceAccount on this machine; None when they can."""
    if os.geteuid() != 0:
        return "a mount namespace of each pod's own needs root"
    for tool in ("unshare", "mount", "sh"):
        if shutil.which(tool) is None:
            return f"no {tool} on the PATH (util-linux)"
    try:
        # The mount point, empty, on the machine itself: each pod mounts its own folder over
        # it, inside its own namespace only.
        MOUNT.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"cannot make {MOUNT}: {e}"
    with tempfile.TemporaryDirectory(prefix="ehb-account-") as folder:
        (Path(folder) / "token").write_text("check")
        try:
            done = subprocess.run(
                [*launcher(Path(folder)), "cat", str(MOUNT / "token")],
                capture_output=True,
                timeout=CHECK_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"unshare failed: {e}"
    if done.returncode != 0 or done.stdout != b"check":
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return f"unshare --mount failed: {said[-1] if said else f'exit {done.returncode}'}"
    return None


def write(folder: Path, *, token: str, ca_certificate: Path, namespace: str) -> Path:
    """The files a kubelet puts in a pod's ServiceAccount mount, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("token", token),
        ("ca.crt", ca_certificate.read_text()),
        ("namespace", namespace),
    ):
        path = folder / name
        path.write_text(text)
        path.chmod(0o600)
    return folder


def launcher(folder: Path) -> tuple[str, ...]:
    """What a pod's argv is run under: a mount namespace with ``folder`` at `MOUNT`. The
    process keeps its pid (``unshare`` and ``sh`` each exec the next), so the node's signals
    reach the pod's program."""
    script = f'mount --bind "$0" {MOUNT} && exec "$@"'
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(folder))


def environment(server: str) -> Mapping[str, str]:
    """The variables that name the API server to a pod (``https://HOST:PORT``)."""
    address = urllib.parse.urlsplit(server)
    return {SERVICE_HOST: str(address.hostname), SERVICE_PORT: str(address.port or 443)}
