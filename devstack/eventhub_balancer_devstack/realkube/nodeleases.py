"""The local node's Node object and its Lease, as a kubelet keeps them.

A kubelet registers its Node, reports its Ready condition, and renews a Lease in
``kube-node-lease`` every 10 s: the node lifecycle controller reads the Lease as the node's
heartbeat and, without it, taints the node and evicts its pods. `LocalNode` calls these.
"""

from __future__ import annotations

import datetime

from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack.realkube import resourcecalls

#: A kubelet renews its Lease every quarter of its 40 s duration.
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0

#: How often the node's Ready condition is written again (a kubelet: every 5 minutes when
#: nothing changed; the Lease is the heartbeat the lifecycle controller reads).
STATUS_REPORT_S = 60.0

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def register(calls: resourcecalls.ResourceCalls, name: str, *, logs_port: int) -> None:
    """Create the Node (kept if it exists) and report it Ready, its log server at
    ``logs_port`` (`nodelogs`)."""
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "ehb-local",
            },
        },
    }
    try:
        calls.call("POST", "/api/v1/nodes", body=body)
    except ApiException as e:
        if e.status != 409:
            raise
    report_status(calls, name, logs_port=logs_port)


def report_status(calls: resourcecalls.ResourceCalls, name: str, *, logs_port: int) -> None:
    stamp = now()
    status = {
        "status": {
            # Where kube-apiserver finds the node's "kubelet" for ``kubectl logs``.
            "daemonEndpoints": {"kubeletEndpoint": {"Port": logs_port}},
            "capacity": {"cpu": "2", "memory": "24Gi", "pods": "1000"},
            "allocatable": {"cpu": "2", "memory": "24Gi", "pods": "1000"},
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "the local node runs pods as processes",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "ehb-local",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "process://local",
                "osImage": "",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
    }
    calls.patch("v1/nodes", name, status, subresource="status")


def renew_lease(calls: resourcecalls.ResourceCalls, name: str) -> None:
    """Renew the node's Lease, creating it the first time."""
    spec = {
        "holderIdentity": name,
        "leaseDurationSeconds": LEASE_DURATION_S,
        "renewTime": _micro_now(),
    }
    try:
        calls.call(
            "PATCH",
            f"{LEASES}/{name}",
            body={"spec": spec},
            content_type="application/merge-patch+json",
        )
    except ApiException as e:
        if e.status != 404:
            raise
        calls.call("POST", LEASES, body={"metadata": {"name": name}, "spec": spec})
