"""An admission policy (a MutatingAdmissionPolicy, a Kyverno or Gatekeeper mutation, a
webhook) that rewrites the operator's own labels on every ConfigMap written, over an hour of
fake time (looptime) on the in-memory fakes.

Neither the operator's watch (it selects ``app.kubernetes.io/managed-by=eventhub-balancer``)
nor the pod (it selects its ConfigMap by the three labels) finds such a ConfigMap. The
operator created it again at every cycle, met its own relabelled one, reported it as made by
someone else (a WARNING and an ``AssignmentTampered`` Event a pod every 30 s) and deleted it;
the pods never got their partitions, and nothing said that a policy was the cause.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps
from eventhub_balancer.handlers import cyclefaults
from tests.handlers import test_daemons as td
from tests.handlers.test_daemons import running as running  # the fixture
from tests.support import fakes

pytestmark = pytest.mark.looptime

HOUR = 3600.0


def gitops_tool(labels: dict[str, str]) -> None:
    """Sets ``app.kubernetes.io/managed-by`` to the GitOps tool's name."""
    labels[configmaps.LABEL_MANAGED_BY] = "argocd"


def unknown_labels_removed(labels: dict[str, str]) -> None:
    """Removes every label outside an allowed list (the operator's own among them)."""
    for key in [k for k in labels if k.startswith(configmaps.PREFIX)]:
        del labels[key]


POLICIES = {"managed-by": gitops_tool, "unknown-removed": unknown_labels_removed}
SAID = {
    "managed-by": "app.kubernetes.io/managed-by: eventhub-balancer -> argocd",
    "unknown-removed": "eventhub-balancer.dev/consumer removed",
}


class RelabellingKube(fakes.FakeKube):
    """A fake API server whose admission rewrites the labels of every ConfigMap written."""

    policy: Callable[[dict[str, str]], None] = staticmethod(gitops_tool)
    #: the policy is installed
    active = True

    def _admitted(self, body: Mapping[str, Any]) -> dict[str, Any]:
        mutated = copy.deepcopy(dict(body))
        if self.active:
            self.policy(mutated.setdefault("metadata", {}).setdefault("labels", {}))
        return mutated

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await super().create_configmap(namespace=namespace, body=self._admitted(body))

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        current = self._get("configmap", namespace, name)
        return await super().patch_configmap(
            namespace=namespace,
            name=name,
            patch={
                **patch,
                "metadata": {**patch.get("metadata", {}), **self._admitted(current)["metadata"]},
            },
            resource_version=resource_version,
        )


def said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("eventhub_balancer") and r.levelno == level
    ]


@pytest.mark.parametrize("policy", list(POLICIES))
async def test_a_policy_that_rewrites_the_operators_labels_is_named_once(
    running: Callable[..., td.Daemon],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
) -> None:
    monkeypatch.setattr(RelabellingKube, "policy", staticmethod(POLICIES[policy]))
    monkeypatch.setattr(fakes, "FakeKube", RelabellingKube)
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec={**td.SPEC, "balancing": {"intervalSeconds": 30}})
    kube = daemon.kube
    await daemon.until(HOUR - 600)
    daemon.deliver()
    writes_before = kube.writes.get("configmap", 0)
    await daemon.until(HOUR)
    daemon.deliver()

    warned = said(caplog, logging.WARNING)
    assert 1 <= len(warned) <= 1 + HOUR / cyclefaults.REMIND_SECONDS, warned
    assert SAID[policy] in warned[0], warned[0]
    assert (
        "exclude the ConfigMaps labelled app.kubernetes.io/managed-by=eventhub-balancer"
        in (warned[0])
    )
    assert "created by someone else" not in caplog.text
    assert "AssignmentTampered" not in [e["reason"] for e in kube.events]
    # Tried at the backoff's pace, at most once a minute: a create and a delete a pod.
    assert kube.writes.get("configmap", 0) - writes_before <= 2 * 2 * 11
    ready = kube.condition(td.NS, td.NAME, "Ready")
    assert ready["reason"] == "AssignmentNotWritten", ready


async def test_a_policy_installed_later_rewrites_the_labels_at_the_next_patch(
    running: Callable[..., td.Daemon],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ConfigMaps were written before the policy came; a rebalance patches them, and the
    policy rewrites their labels then: the same one warning, no tampering reported."""
    monkeypatch.setattr(fakes, "FakeKube", RelabellingKube)
    monkeypatch.setattr(RelabellingKube, "active", False)
    caplog.set_level(logging.INFO, logger="eventhub_balancer")
    daemon = running("a", "b", spec={**td.SPEC, "balancing": {"intervalSeconds": 30}})
    kube = daemon.kube
    await daemon.until(5)
    assert set(daemon.owned("a")) | set(daemon.owned("b")) == {"0", "1", "2", "3"}
    monkeypatch.setattr(RelabellingKube, "active", True)
    kube.add_pod(td.NS, "c", labels={"app": "c"}, since=td.clock())
    daemon.deliver()
    await daemon.until(600)
    daemon.deliver()
    warned = said(caplog, logging.WARNING)
    assert len(warned) == 1, warned
    assert "patch ConfigMap" in warned[0] or "create ConfigMap" in warned[0]
    assert SAID["managed-by"] in warned[0]
    assert "AssignmentTampered" not in [e["reason"] for e in kube.events]
