"""kopf, unmodified, under the local API's watch faults: an early close with 410 on resume
makes it list again and go on watching; a lag delays what its handlers see."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import kopf
import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI

#: The longest a step waits for kopf (it reacts in well under a second on the local server).
WAIT_S = 15.0

pytestmark = pytest.mark.timeout(90)


def _seen_by_kopf() -> tuple[Any, dict[str, float], threading.Condition]:
    """A registry whose event handler notes when it saw each ConfigMap by name."""
    registry = kopf.OperatorRegistry()
    seen: dict[str, float] = {}
    changed = threading.Condition()

    @kopf.on.event("v1", "configmaps", registry=registry)
    def noted(name: str, type: str | None, **_: Any) -> None:
        if type is None or type == "ADDED":  # listed, or added since
            with changed:
                seen.setdefault(name, time.monotonic())
                changed.notify_all()

    return registry, seen, changed


def _wait(changed: threading.Condition, check: Callable[[], bool]) -> None:
    with changed:
        assert changed.wait_for(check, timeout=WAIT_S), "kopf did not see it in time"


def test_kopf_lists_again_after_an_early_close_with_410_and_keeps_watching(
    local_kube: LocalKubeAPI, kopf_operator: Any
) -> None:
    registry, seen, changed = _seen_by_kopf()
    with kopf_operator(registry, namespaces=["ns"]):
        local_kube.create_object("v1/configmaps", {"metadata": {"name": "a"}}, namespace="ns")
        _wait(changed, lambda: "a" in seen)
        local_kube.inject_watch_fault("close", seconds=2.0, close_after_s=1.0)
        local_kube.inject_watch_fault("gone", seconds=2.0)
        # kopf's resume of its ended stream got 410 Gone, so it listed and watched again.
        deadline = time.monotonic() + WAIT_S
        while local_kube.watch_fault_effects().get("expired", 0) == 0:
            assert time.monotonic() < deadline, "kopf never resumed into the 410"
            time.sleep(0.05)
        assert local_kube.watch_fault_effects()["closed"] >= 1
        local_kube.create_object("v1/configmaps", {"metadata": {"name": "b"}}, namespace="ns")
        _wait(changed, lambda: "b" in seen)


def test_kopf_handlers_see_a_lagging_watch_late(
    local_kube: LocalKubeAPI, kopf_operator: Any
) -> None:
    registry, seen, changed = _seen_by_kopf()
    with kopf_operator(registry, namespaces=["ns"]):
        local_kube.create_object("v1/configmaps", {"metadata": {"name": "a"}}, namespace="ns")
        _wait(changed, lambda: "a" in seen)
        lag_s = 2.0
        local_kube.inject_watch_fault("lag", seconds=30.0, plural="configmaps", lag_s=lag_s)
        written = time.monotonic()
        local_kube.create_object("v1/configmaps", {"metadata": {"name": "b"}}, namespace="ns")
        _wait(changed, lambda: "b" in seen)
        assert seen["b"] - written >= lag_s
