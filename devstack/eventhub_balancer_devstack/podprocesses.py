"""The processes behind the local kubelet's pods: what a pod runs and how it is started.

`kubelet` keeps the pods' books (their Pod objects, readiness, restarts and deletion); this
module holds the workload's `PodTemplate` and starts one pod's process from it, with the
variables the Downward API would give a container and a free port for its probes.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: The pod fields a ``downward`` variable may name (what the runtime reads).
DOWNWARD_FIELDS = frozenset({"metadata.name", "metadata.namespace", "metadata.uid"})


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodTemplate:
    """What every pod of the workload runs.

    ``command`` receives the pod's name and the port its probes and metrics are served on and
    returns the argv; the process gets ``POD_NAME``, ``POD_NAMESPACE`` and ``POD_UID`` as the
    Downward API would give them, plus ``env``, plus ``downward`` (variable -> field path,
    ``metadata.name``, ``metadata.namespace`` or ``metadata.uid``) as a pod spec's
    ``fieldRef`` entries name them.
    """

    name_prefix: str
    labels: Mapping[str, str]
    command: Callable[[str, int], Sequence[str]]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    downward: Mapping[str, str] = dataclasses.field(default_factory=dict)
    readiness_path: str = "/readyz"
    #: ``https`` probes as a kubelet does: TLS, with the certificate not verified.
    readiness_scheme: str = "http"
    termination_grace_s: float = 30.0
    log_dir: Path | None = None
    #: What the argv is run under (`realkube.accountmounts.launcher`): nothing by default.
    launcher: Sequence[str] = ()
    #: Variables of the node's own environment the process does not inherit.
    unset: frozenset[str] = frozenset()


def spawn(
    template: PodTemplate, *, name: str, namespace: str, uid: str, port: int
) -> subprocess.Popen[bytes]:
    """Start one pod's process; its output goes to ``log_dir/NAME.log`` if there is a log_dir."""
    env = {k: v for k, v in os.environ.items() if k not in template.unset}
    env.update(template.env)
    fields = {"metadata.name": name, "metadata.namespace": namespace, "metadata.uid": uid}
    env.update({"POD_NAME": name, "POD_NAMESPACE": namespace, "POD_UID": uid})
    env.update({variable: fields[path] for variable, path in template.downward.items()})
    argv = [*template.launcher, *template.command(name, port)]
    out: Any = subprocess.DEVNULL
    if template.log_dir is not None:
        template.log_dir.mkdir(parents=True, exist_ok=True)
        out = (template.log_dir / f"{name}.log").open("ab")
    process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    if out is not subprocess.DEVNULL:
        out.close()
    return process


def probe(template: PodTemplate, port: int, *, timeout: float) -> bool:
    """The readiness probe: a 2xx from ``readiness_path`` on ``port`` within ``timeout``."""
    url = f"{template.readiness_scheme}://127.0.0.1:{port}{template.readiness_path}"
    context = None
    if template.readiness_scheme == "https":
        # As a kubelet's HTTPS probe: encrypted, the serving certificate not checked.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
