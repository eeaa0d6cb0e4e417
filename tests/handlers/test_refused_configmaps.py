"""One pod's ConfigMap create refused by the namespace's admission, not by the operator's
RBAC: a ResourceQuota on configmaps that is used up, or an admission webhook that denies it
(kube-apiserver answers both 403 Forbidden), on fake time (looptime) over the in-memory fakes.
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

#: What kube-apiserver answers, by who refuses (its message, as each admission words it).
MESSAGES = {
    "quota": 'configmaps "{name}" is forbidden: exceeded quota: configmaps, requested: '
    "configmaps=1, used: configmaps=2, limited: configmaps=2",
    "webhook": 'admission webhook "configmaps.policy.example.com" denied the request: '
    "ConfigMaps need the label team",
    "policy": "configmaps \"{name}\" is forbidden: ValidatingAdmissionPolicy 'no-new-configmaps' "
    "with binding 'no-new-configmaps' denied request: new ConfigMaps are frozen",
    "rbac": 'configmaps is forbidden: User "system:serviceaccount:ehb:eventhub-balancer" '
    'cannot create resource "configmaps" in API group "" in the namespace "shop"',
}
#: What the operator's log must name as the fix.
FIXES = {
    "quota": "ResourceQuota",
    "webhook": "admission",
    "policy": "admission",
    "rbac": "grant the operator's ServiceAccount access",
}


def refusal(who: str, name: str) -> errors.EventHubBalancerError:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": MESSAGES[who].format(name=name),
        "reason": "Forbidden",
        "details": {"name": name, "kind": "configmaps"},
        "code": 403,
    }
    refused = kube_exceptions.ApiException(status=403, reason="Forbidden")
    refused.body = json.dumps(body)
    return kubeclients._wrap(refused, f"create ConfigMap shop/{name}")


class RefusingKube(fakes.FakeKube):
    """Refuses the ConfigMap of pod ``c`` alone."""

    who = "quota"

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        name = str(body["metadata"]["name"])
        if (body["data"] or {}).get("pod") == "c":
            self._write("create", "configmap", name)
            raise refusal(self.who, name)
        return await super().create_configmap(namespace=namespace, body=body)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("eventhub_balancer") and r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize("who", list(MESSAGES))
async def test_a_refused_configmap_names_who_refused_it(
    running: Callable[..., td.Daemon],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    who: str,
) -> None:
    """The other pods' writes of the same decision go out (their revocations), the log says it
    once, and names the fix of what refused it: a quota or an admission policy is no right to
    grant (it said ``grant the operator's ServiceAccount access`` for each)."""
    monkeypatch.setattr(fakes, "FakeKube", RefusingKube)
    monkeypatch.setattr(RefusingKube, "who", who)
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec={**td.SPEC, "balancing": {"intervalSeconds": 30}})
    kube = daemon.kube
    await daemon.until(5)
    caplog.clear()
    kube.add_pod(td.NS, "c", labels={"app": "c"}, since=td.clock())
    daemon.deliver()
    await daemon.until(6)
    revoking = [p for pod in "ab" for p, (_, s) in daemon.owned(pod).items() if s == "revoking"]
    assert len(revoking) == 1, kube.assignment(td.NS)  # the same decision's other writes
    await daemon.until(600)
    warned = warnings(caplog)
    assert len(warned) == 1, warned
    assert FIXES[who] in warned[0], warned[0]
    if who != "rbac":
        assert "grant" not in warned[0], warned[0]
    ready = kube.condition(td.NS, td.NAME, "Ready")
    assert ready["reason"] == "AssignmentNotWritten", ready
