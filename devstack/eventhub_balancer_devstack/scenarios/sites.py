"""The local stack a scenario runs on, and a site of its own on it for each system.

`local_stack` starts the local stack on free ports with an I/O loop and a work directory;
`make_site` gives one system under test a namespace, record and log directories, and a
checkpoint container of its own on that stack.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from eventhub_balancer import runners
from eventhub_balancer_devstack import kubeservers
from eventhub_balancer_devstack.kube import LocalKubeAPI, kubeconfigs
from eventhub_balancer_devstack.realkube import RealControlPlane
from eventhub_balancer_devstack.scenarios import systems
from eventhub_balancer_devstack.stacks import LocalStack, StackOptions

logger = logging.getLogger(__name__)

#: The longest any single call onto the I/O loop (the producer, checkpoint reads) may take
#: before the caller gives up, and the longest wait for that loop to stop.
CALL_TIMEOUT_S = 30.0
LOOP_STOP_S = 10.0


@contextlib.contextmanager
def local_stack(
    *,
    hubs: dict[str, int],
    work_dir: Path | None = None,
    kube: Callable[[Path], kubeservers.KubeServer] | None = None,
    kube_kind: kubeservers.Kind = "local",
) -> Iterator[tuple[LocalStack, runners.BackgroundLoop, Path]]:
    """The local stack on free ports, an I/O loop, and a work directory; stopped on exit.
    ``kube``: makes the Kubernetes API server from the work directory, instead of one in
    this process; ``kube_kind="real"``: the real control plane (``kube`` then unused)."""
    temporary = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="ehb-demo-")) if work_dir is None else work_dir
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Made inside the try: a hub the emulator refuses fails here, and left the directory.
        stack = LocalStack(
            StackOptions(
                hubs=hubs,
                eventhubs_port=0,
                blob_port=0,
                kube_port=0,
                state_dir=root,
                kube=kube_kind,
            ),
            kube=kube(root) if kube is not None and kube_kind == "local" else None,
        )
        loop = runners.BackgroundLoop(name="scenario-io", timeout=CALL_TIMEOUT_S).start()
        try:
            with stack:
                yield stack, loop, root
        finally:
            try:
                loop.stop(timeout=LOOP_STOP_S)
            except TimeoutError:
                logger.warning("the scenario's I/O loop did not stop in %g s", LOOP_STOP_S)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


def make_site(
    *,
    stack: LocalStack,
    loop: runners.BackgroundLoop,
    root: Path,
    label: str,
    hub: str,
    interval_seconds: int,
    blob_connection_string: str | None = None,
) -> systems.Site:
    """A namespace, record and log directories, and a checkpoint container of its own."""
    suffix = uuid.uuid4().hex[:6]
    record_dir = root / label / "records"
    log_dir = root / label / "logs"
    record_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    namespace = f"{label}-{suffix}"
    if isinstance(stack.kube, RealControlPlane):
        # The local API makes namespaces on first use; a real one needs them, with their
        # default ServiceAccount, before the kubelet's first pod.
        stack.kube.calls.ensure_namespace(namespace)
    return systems.Site(
        stack=stack,
        loop=loop,
        namespace=namespace,
        hub=hub,
        consumer=hub,
        container=f"checkpoints-{label}-{suffix}",
        record_dir=record_dir,
        log_dir=log_dir,
        blob_connection_string=blob_connection_string or stack.blob_connection_string,
        interval_seconds=interval_seconds,
    )


def kubelet_client(site: systems.Site, *, token: str) -> k8s.ApiClient:
    """The API client of the site's local kubelet (and of the runner's watches): on the local
    API server with the kubelet's ``token``, which an API outage spares; on a real server as
    the administrator (it has no pause to spare the kubelet from)."""
    kube = site.stack.kube
    path = site.kubeconfig.with_name(f"{site.namespace}-kubelet.kubeconfig")
    kubeconfig = (
        kubeconfigs.write(path, server=kube.url, namespace=site.namespace, user={"token": token})
        if isinstance(kube, LocalKubeAPI)
        else kube.write_kubeconfig(path, namespace=site.namespace)
    )
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    return k8s.ApiClient(configuration)
