"""Tokens from TokenRequest and the kubeconfigs that carry them, as a kubelet mounts them.

A pod on a cluster presents a token bound to it (its ServiceAccount's, with the pod as the
bound object); a tenant's workload identity is a token of its ServiceAccount for Entra ID's
audience. The real API server signs both with the control plane's service-account key, so the
tokens here are the real thing, not the local API's unsigned stand-ins.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from eventhub_balancer_devstack.kube import identities, kubeconfigs
from eventhub_balancer_devstack.realkube import resourcecalls

#: What a pod's token is valid for: a kubelet asks for an hour and renews; a test or demo
#: never runs that long without a new pod.
POD_TOKEN_SECONDS = 3600


def _request(
    calls: resourcecalls.ResourceCalls, namespace: str, account: str, spec: dict[str, object]
) -> str:
    answer = calls.call(
        "POST",
        resourcecalls.path("v1/serviceaccounts", namespace=namespace, name=account) + "/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(answer["status"]["token"])


def pod_token(
    calls: resourcecalls.ResourceCalls,
    identity: identities.PodIdentity,
    *,
    seconds: int = POD_TOKEN_SECONDS,
) -> str:
    """A token of the pod's ServiceAccount bound to the pod."""
    return _request(
        calls,
        identity.namespace,
        identity.service_account,
        {
            "audiences": [],
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": identity.pod_name,
                "uid": identity.pod_uid,
            },
        },
    )


def service_account_token(
    calls: resourcecalls.ResourceCalls,
    *,
    namespace: str,
    name: str,
    seconds: int = POD_TOKEN_SECONDS,
) -> str:
    """A token of ServiceAccount ``namespace/name``, bound to nothing."""
    return _request(calls, namespace, name, {"audiences": [], "expirationSeconds": seconds})


def write_kubeconfig(
    path: Path, *, server: str, ca_certificate: Path, namespace: str, user: dict[str, object]
) -> Path:
    """A kubeconfig for the real server (HTTPS, its CA inline) and ``user``, mode 0600."""
    document = kubeconfigs.build(server=server, namespace=namespace, user=user)
    cluster = document["clusters"][0]["cluster"]  # type: ignore[index]
    cluster["certificate-authority-data"] = base64.b64encode(ca_certificate.read_bytes()).decode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)
    return path
