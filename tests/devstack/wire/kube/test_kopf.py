"""kopf, unmodified, running handlers against the local API server."""

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI

kopf = pytest.importorskip("kopf")

EHC = "eventhub-balancer.dev/v1alpha1/eventhubconsumers"

#: How long kopf gets to react; it reacts in well under a second on the local server.
REACTION_TIMEOUT = 15.0


def _wait_for(check: Callable[[], Any], *, timeout: float = REACTION_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"not true within {timeout} s: {check}")


def _seen_by(api: LocalKubeAPI, pod: str) -> str | None:
    body = api.get_object("v1/pods", pod, namespace="ns") or {}
    annotations: dict[str, str] = body.get("metadata", {}).get("annotations") or {}
    return annotations.get("seen-by")


def test_create_and_delete_handlers_run(
    local_kube: LocalKubeAPI, kopf_operator: Any, ehc_spec: dict[str, Any]
) -> None:
    registry = kopf.OperatorRegistry()
    deleted: list[str] = []

    @kopf.on.create("eventhub-balancer.dev", "v1alpha1", "eventhubconsumers", registry=registry)
    def created(body: Any, name: str, patch: Any, **_: Any) -> None:
        patch.status["observedGeneration"] = body["metadata"]["generation"]
        kopf.event(body, type="Normal", reason="Seen", message=f"created {name}")

    @kopf.on.delete("eventhub-balancer.dev", "v1alpha1", "eventhubconsumers", registry=registry)
    def removed(name: str, **_: Any) -> None:
        deleted.append(name)

    with kopf_operator(registry, namespaces=["shop"]):
        local_kube.create_object(
            EHC, {"metadata": {"name": "orders"}, "spec": ehc_spec}, namespace="shop"
        )

        obj = _wait_for(
            lambda: (
                (o := local_kube.get_object(EHC, "orders", namespace="shop"))
                and (o.get("status") or {}).get("observedGeneration") == 1
                and o
            )
        )
        # kopf's finalizer is added by a JSON patch guarded by a resourceVersion test.
        assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        events = _wait_for(lambda: local_kube.list_objects("v1/events", namespace="shop"))
        assert events[0]["reason"] == "Seen"
        assert events[0]["involvedObject"]["name"] == "orders"

        local_kube.delete_object(EHC, "orders", namespace="shop")
        _wait_for(lambda: local_kube.get_object(EHC, "orders", namespace="shop") is None)
        assert deleted == ["orders"]


def test_handlers_see_objects_created_before_start(
    local_kube: LocalKubeAPI, kopf_operator: Any
) -> None:
    registry = kopf.OperatorRegistry()
    local_kube.create_object(
        "v1/pods", {"metadata": {"name": "early", "labels": {"app": "x"}}}, namespace="ns"
    )

    @kopf.on.resume("v1", "pods", labels={"app": "x"}, registry=registry)
    @kopf.on.create("v1", "pods", labels={"app": "x"}, registry=registry)
    def annotate(patch: Any, **_: Any) -> None:
        patch.metadata.annotations["seen-by"] = "kopf"

    with kopf_operator(registry, namespaces=["ns"]):
        _wait_for(lambda: _seen_by(local_kube, "early") == "kopf")
        local_kube.create_object(
            "v1/pods", {"metadata": {"name": "late", "labels": {"app": "x"}}}, namespace="ns"
        )
        _wait_for(lambda: _seen_by(local_kube, "late") == "kopf")


def test_peering_objects_are_kept(local_kube: LocalKubeAPI, kopf_operator: Any) -> None:
    registry = kopf.OperatorRegistry()
    local_kube.create_object(
        "kopf.dev/v1/kopfpeerings", {"metadata": {"name": "ehb"}}, namespace="shop"
    )

    @kopf.on.create("v1", "configmaps", registry=registry)
    def noop(**_: Any) -> None:
        pass

    with kopf_operator(
        registry, namespaces=["shop"], standalone=False, peering_name="ehb", priority=10
    ):
        peering = _wait_for(
            lambda: (
                local_kube.get_object("kopf.dev/v1/kopfpeerings", "ehb", namespace="shop") or {}
            ).get("status")
        )
        ((_identity, info),) = peering.items()
        assert info["priority"] == 10


def test_kopf_logs_in_through_the_kubeconfig(
    kubeconfig: Path, local_kube: LocalKubeAPI, kopf_operator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    registry = kopf.OperatorRegistry()
    seen: list[str] = []

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        info = kopf.login_with_kubeconfig(**kwargs)
        seen.append(info.server)
        return info

    @kopf.on.create("v1", "secrets", registry=registry)
    def noop(**_: Any) -> None:
        pass

    caplog.set_level(logging.WARNING)
    with kopf_operator(registry, namespaces=["default"], login=False):
        _wait_for(lambda: seen)
    assert seen[0] == local_kube.url
