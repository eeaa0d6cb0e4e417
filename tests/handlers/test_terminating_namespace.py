"""A consumer's namespace being deleted (``kubectl delete namespace shop``) while the operator
runs, on fake time (looptime) over the in-memory fakes.

The namespace controller deletes the ConfigMaps at once and the pods gracefully, so the
consumer's pods are still terminating, with their partitions, when their ConfigMaps are gone;
and kube-apiserver refuses every create in the namespace (403, cause NamespaceTerminating).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeclients
from tests.handlers import test_daemons as td
from tests.handlers.test_daemons import running as running  # the fixture
from tests.support import fakes

pytestmark = pytest.mark.looptime


def terminating(namespace: str, kind: str, name: str) -> errors.EventHubBalancerError:
    """kube-apiserver's answer to a create in a namespace being deleted (its NamespaceLifecycle
    admission), as the operator's adapter takes it."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{kind} "{name}" is forbidden: unable to create new content in namespace '
        f"{namespace} because it is being terminated",
        "reason": "Forbidden",
        "details": {
            "name": name,
            "kind": kind,
            "causes": [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {namespace} is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        },
        "code": 403,
    }
    refused = kube_exceptions.ApiException(status=403, reason="Forbidden")
    refused.body = json.dumps(body)
    return kubeclients._wrap(refused, f"create {kind} in {namespace}")


class DeletedNamespaceKube(fakes.FakeKube):
    """A fake API server whose namespaces in ``terminating`` refuse every create."""

    def __init__(self) -> None:
        super().__init__()
        self.terminating: set[str] = set()
        self.refused: list[str] = []

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if namespace in self.terminating:
            name = str(body["metadata"]["name"])
            self._write("create", "configmap", name)
            self.refused.append(name)
            raise terminating(namespace, "configmaps", name)
        return await super().create_configmap(namespace=namespace, body=body)

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        if namespace in self.terminating:
            self._write("create", "event", str(body.get("reason")))
            raise terminating(namespace, "events", "orders.1")
        await super().create_event(namespace=namespace, body=body)

    def delete_namespace(self, namespace: str, *, at: Any) -> None:
        """What the namespace controller does first: creates refused, ConfigMaps deleted,
        pods told to stop (they keep running through their grace period)."""
        self.terminating.add(namespace)
        for kind, ns, name in list(self.objects):
            if ns != namespace:
                continue
            if kind == "configmap":
                self._delete(kind, ns, name)
            elif kind == "pod":
                self.terminate(ns, name, at=at)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("eventhub_balancer") and r.levelno >= logging.WARNING
    ]


async def test_a_namespace_being_deleted_is_no_fault_of_the_cycles(
    running: Callable[..., td.Daemon], caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    """Its pods still terminate with their partitions when their ConfigMaps are gone: the
    cycle's creates of them are refused. That failed the cycle: a WARNING ``cycle failed
    (... being deleted)``, a backoff up to 32 s that held the hand-off timeouts up by half a
    minute, and ``cycles succeed again`` at the end."""
    monkeypatch.setattr(fakes, "FakeKube", DeletedNamespaceKube)
    caplog.set_level(logging.DEBUG, logger="eventhub_balancer")
    daemon = running("a", "b", spec={**td.SPEC, "balancing": {"intervalSeconds": 30}})
    kube = daemon.kube
    assert isinstance(kube, DeletedNamespaceKube)
    await daemon.until(5)
    assert set(daemon.owned("a")) | set(daemon.owned("b")) == {"0", "1", "2", "3"}
    caplog.clear()
    kube.delete_namespace(td.NS, at=td.clock())
    daemon.deliver()
    # The pods' partitions are revoked; nobody can be told (their ConfigMaps are gone), so the
    # hand-offs time out 30 s later (handoffTimeoutSeconds), not after a minute of backoff.
    await daemon.until(40)
    assert kube.status(td.NS, td.NAME).get("assignment") == []
    assert ("create", "event", "PartitionUnassigned") in kube.calls
    await daemon.until(600)
    assert warnings(caplog) == []
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert not [line for line in said if "succeed again" in line], said
    assert "grant" not in caplog.text
    # Each pod's create tried once a decision, not at every retry of a backoff.
    assert len(kube.refused) <= 4, kube.refused
