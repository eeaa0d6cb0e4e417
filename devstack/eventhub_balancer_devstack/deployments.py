"""A Deployment's pods as local processes: what the local stack runs a rendered chart with.

`kubelet.LocalKubelet` runs the pods of one workload from a `kubelet.PodTemplate`; this module
derives that template from a Deployment as the API server holds it (after ``kubectl apply`` of
a chart's rendering, say), so that what runs is what the manifests say: the container's args,
its environment (values, Downward API fields, Secret keys read from the API as the kubelet
reads them), its Secret volumes (each item written as a file under a local directory, which
stands for the mount path wherever a variable names a path under it; written at start, and
again by `refresh_secret_volumes` when the Secret changes: the real-kube node does, every few
seconds),
its readiness probe, its termination grace period and its pod labels.

Two things a cluster gives and this machine does not are supplied by the caller: what an
image runs (`LocalImage`: the entry point's argv and the environment the image sets, e.g. a
virtualenv with the handler's wheel installed), and what a node gives every container (the
in-cluster API credentials: here a ``KUBECONFIG``). All pods share this machine's network, so
each listens on a port of its own: the container's port, wherever the args give it as
``--port=N`` or ``--NAME-port=N``, becomes the pod's port.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from eventhub_balancer_devstack import kubelet

#: The longest wait for the API in any single call.
API_TIMEOUT_S = 10


class UnrunnableSpec(ValueError):
    """A Deployment this module cannot run as it says; the message names the field."""


class MissingSecret(UnrunnableSpec):
    """A Secret or its key the container needs is not there (yet): a kubelet tries again."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalImage:
    """What a container image runs here: its entry point's argv and the environment it sets."""

    entrypoint: tuple[str, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _readiness(container: Mapping[str, Any]) -> tuple[str, int, str]:
    """The readiness probe's path, the container port it probes, and its scheme."""
    probe = (container.get("readinessProbe") or {}).get("httpGet")
    if not probe:
        raise UnrunnableSpec("containers[0].readinessProbe: an httpGet probe is needed")
    port = probe.get("port")
    if isinstance(port, str):
        named = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
        if port not in named:
            raise UnrunnableSpec(f"readinessProbe.httpGet.port: no container port named {port}")
        port = named[port]
    scheme = str(probe.get("scheme") or "HTTP").lower()
    if scheme not in ("http", "https"):
        raise UnrunnableSpec(
            f"readinessProbe.httpGet.scheme: {probe.get('scheme')} is not HTTP or HTTPS"
        )
    return str(probe.get("path") or "/"), int(port), scheme


def _environment(
    container: Mapping[str, Any], secret_value: Callable[[str, str], str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(variables, Downward API variables -> field path) of the container's ``env``."""
    values: dict[str, str] = {}
    downward: dict[str, str] = {}
    for entry in container.get("env") or []:
        name = entry["name"]
        source = entry.get("valueFrom")
        if source is None:
            values[name] = str(entry.get("value", ""))
        elif "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path not in kubelet.DOWNWARD_FIELDS:
                raise UnrunnableSpec(f"env {name}: fieldRef {path} is not served locally")
            downward[name] = path
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            values[name] = secret_value(ref["name"], ref["key"])
        else:
            raise UnrunnableSpec(f"env {name}: only value, fieldRef and secretKeyRef are served")
    return values, downward


def _secret_items(
    spec: Mapping[str, Any], container: Mapping[str, Any], volume_dir: Path | None
) -> list[tuple[str, Path, str, str]]:
    """(mount path, local file, Secret, key) of each item of the container's Secret volumes,
    its file in ``volume_dir`` (one directory per volume) as the kubelet lays them out."""
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    items = []
    for mount in container.get("volumeMounts") or []:
        secret = volumes.get(mount["name"], {}).get("secret")
        if secret is None:
            continue  # an emptyDir: the process has this machine's file system
        field = f"volumes[{mount['name']}].secret"
        if not secret.get("items") or mount.get("subPath"):
            raise UnrunnableSpec(f"{field}: only items mounted as a whole directory are served")
        if volume_dir is None:
            raise UnrunnableSpec(f"{field}: no local directory to write it to")
        for item in secret["items"]:
            local = volume_dir / mount["name"] / item["path"]
            items.append((str(mount["mountPath"]), local, secret["secretName"], item["key"]))
    return items


def _write(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` unless it holds it already, in one rename, so that a reader
    sees the old content or the new, never a part (the kubelet swaps a symlink). True: it
    changed."""
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)
    return True


def _write_items(
    items: list[tuple[str, Path, str, str]], secret_value: Callable[[str, str], str]
) -> list[Path]:
    """Write each item's file from its Secret key (`_write`); the files that changed."""
    return [local for _, local, secret, key in items if _write(local, secret_value(secret, key))]


def _secret_volumes(
    spec: Mapping[str, Any],
    container: Mapping[str, Any],
    secret_value: Callable[[str, str], str],
    volume_dir: Path | None,
) -> dict[str, str]:
    """{mount path: local directory} of the container's Secret volumes, their items written
    into ``volume_dir`` (one directory per volume) as the kubelet writes them."""
    items = _secret_items(spec, container, volume_dir)
    _write_items(items, secret_value)
    return {mount.rstrip("/"): str(local.parent) for mount, local, _, _ in items}


def refresh_secret_volumes(
    spec: Mapping[str, Any], secret_value: Callable[[str, str], str], volume_dir: Path
) -> list[Path]:
    """Write again the files of a running pod's Secret volumes whose Secret changed, as a
    kubelet does at its sync of the pod (the credential rotation a pod follows in its files);
    the files that changed. A Secret or key gone leaves the files as they are
    (`MissingSecret`), as the kubelet keeps the volume's last content."""
    return _write_items(_secret_items(spec, spec["containers"][0], volume_dir), secret_value)


def _local_path(value: str, mounted: Mapping[str, str]) -> str:
    """``value`` with a path under a mounted volume turned into the local file's path."""
    for mount, local in mounted.items():
        if value.startswith(mount + "/"):
            return local + value[len(mount) :]
    return value


#: An argument that sets a listening port: ``--port=8080``, ``--metrics-port=8080``.
_PORT_FLAG = re.compile(r"(--(?:[a-z0-9]+-)*port)=(\d+)")


def _own_port(arg: str, container_port: int, port: int) -> str:
    """The pod's own port where ``arg`` sets the probed container port (pods share a host)."""
    match = _PORT_FLAG.fullmatch(arg)
    if match is not None and int(match.group(2)) == container_port:
        return f"{match.group(1)}={port}"
    return arg


def secret_key(body: Mapping[str, Any] | None, *, namespace: str, secret: str, key: str) -> str:
    """The value of ``key`` in the Secret ``body`` (None: not found), or `UnrunnableSpec` in a
    kubelet's words: ``secret "orders-eh" not found``, ``couldn't find key cs in Secret
    shop/orders-eh``. A missing Secret read as a missing key, which sent users to the key."""
    if body is None:
        raise MissingSecret(f'secret "{secret}" not found')
    data = body.get("data") or {}
    if key not in data:
        raise MissingSecret(f"couldn't find key {key} in Secret {namespace}/{secret}")
    return base64.b64decode(data[key]).decode()


def pod_template(
    deployment: Mapping[str, Any],
    *,
    images: Mapping[str, LocalImage],
    secret_value: Callable[[str, str], str],
    node_env: Mapping[str, str],
    log_dir: Path | None = None,
    volume_dir: Path | None = None,
) -> kubelet.PodTemplate:
    """The local kubelet's template for a Deployment's pods (pure but for ``secret_value``
    and the files of its Secret volumes, written under ``volume_dir``)."""
    template = deployment["spec"]["template"]
    spec = template["spec"]
    containers = spec["containers"]
    if len(containers) != 1 or spec.get("initContainers"):
        raise UnrunnableSpec("spec.template.spec: one container and no init containers")
    (container,) = containers
    image = images.get(container["image"])
    if image is None:
        raise UnrunnableSpec(f"containers[0].image: no local image for {container['image']}")
    if container.get("command"):
        raise UnrunnableSpec("containers[0].command: the image's entry point is what runs here")
    args = [str(a) for a in container.get("args") or []]
    path, container_port, scheme = _readiness(container)
    values, downward = _environment(container, secret_value)
    mounted = _secret_volumes(spec, container, secret_value, volume_dir)
    values = {name: _local_path(value, mounted) for name, value in values.items()}

    def command(name: str, port: int) -> list[str]:
        own = [_own_port(a, container_port, port) for a in args]
        return [*image.entrypoint, *own]

    return kubelet.PodTemplate(
        name_prefix=deployment["metadata"]["name"],
        labels=dict(template["metadata"].get("labels") or {}),
        command=command,
        env={**image.env, **node_env, **values},
        downward=downward,
        readiness_path=path,
        readiness_scheme=scheme,
        termination_grace_s=float(spec.get("terminationGracePeriodSeconds", 30)),
        log_dir=log_dir,
    )


def _json(response: Any) -> dict[str, Any]:
    """The body of a call made with ``_preload_content=False`` (the API's JSON as is)."""
    body: dict[str, Any] = json.loads(response.data)
    return body


def start(
    api_client: k8s.ApiClient,
    namespace: str,
    name: str,
    *,
    images: Mapping[str, LocalImage],
    node_env: Mapping[str, str],
    log_dir: Path | None = None,
) -> kubelet.LocalKubelet:
    """Read Deployment ``name`` and start its ``spec.replicas`` pods; the caller stops them."""
    deployment = _json(
        k8s.AppsV1Api(api_client).read_namespaced_deployment(
            name, namespace, _preload_content=False, _request_timeout=API_TIMEOUT_S
        )
    )
    core = k8s.CoreV1Api(api_client)

    def secret_value(secret: str, key: str) -> str:
        try:
            body = _json(
                core.read_namespaced_secret(
                    secret, namespace, _preload_content=False, _request_timeout=API_TIMEOUT_S
                )
            )
        except k8s.ApiException as e:
            if e.status != 404:
                raise
            body = None
        return secret_key(body, namespace=namespace, secret=secret, key=key)

    volume_dir = (log_dir / "volumes") if log_dir is not None else None
    template = pod_template(
        deployment,
        images=images,
        secret_value=secret_value,
        node_env=node_env,
        log_dir=log_dir,
        volume_dir=volume_dir or Path(tempfile.mkdtemp(prefix=f"{name}-volumes-")),
    )
    pods = kubelet.LocalKubelet(api_client=api_client, namespace=namespace, template=template)
    pods.start()
    try:
        pods.scale(int(deployment["spec"].get("replicas", 1)))
    except BaseException:
        pods.stop()
        raise
    return pods
