"""`kubectl get ehc` on a real kube-apiserver: a row tells a person what state a consumer is in.

The statuses are the operator's own, built by its pure cycle for a consumer walked through
its states (`tests/install/test_gitops_health.py`), written through the status subresource
as the operator writes them; the rows are what the real kubectl prints from the CRD's printer
columns. A paused consumer, which processes nothing, must not print as the balanced one does,
and a consumer that waits for a person must say why in its row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.install import test_gitops_health as states
from tests.install.test_crd_rules import example
from tests.support.fixtures.realkube import Kubectl

NAMESPACE = "shop"
#: state -> (its status, what its row must say besides the columns every row has)
ROWS: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "balanced": (states.balanced, "AllPartitionsOwned"),
    "paused": (states.paused, "Paused"),
    "pausing": (states.pausing, "Pausing"),
    "invalid-spec": (states.invalid_spec, "InvalidSpec"),
    "consumer-group-missing": (states.consumer_group_missing, "EventHubUnusable"),
}


@pytest.fixture(scope="module")
def kubectl(real_kubectl: Kubectl) -> Kubectl:
    real_kubectl("create", "namespace", NAMESPACE)
    return real_kubectl


def row(kubectl: Kubectl, name: str, status: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The header and the row `kubectl get ehc` prints for a consumer with ``status``."""
    body = example()
    body["metadata"] = {"name": name, "namespace": NAMESPACE}
    kubectl("apply", "-f", "-", input=json.dumps(body))
    patch = json.dumps({"status": status})
    kubectl(
        "-n", NAMESPACE, "patch", "ehc", name, "--subresource=status", "--type=merge", "-p", patch
    )
    header, line = kubectl("-n", NAMESPACE, "get", "ehc", name).stdout.splitlines()
    return header.split(), line.split()


@pytest.mark.parametrize("state", ROWS)
def test_a_row_says_the_state_of_its_consumer(kubectl: Kubectl, state: str) -> None:
    build, words = ROWS[state]
    header, line = row(kubectl, state, build()["status"])
    assert header[:1] == ["NAME"]
    assert header[-1] == "AGE"
    assert words in line, f"{state}: {dict(zip(header, line, strict=False))}"


def test_a_paused_consumer_does_not_print_as_a_working_one(kubectl: Kubectl) -> None:
    _, working = row(kubectl, "working", states.balanced()["status"])
    _, paused = row(kubectl, "resting", states.paused()["status"])
    assert working[1:-1] != paused[1:-1]
