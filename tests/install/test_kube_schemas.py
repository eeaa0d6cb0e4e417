"""`tests.support.kubeschemas` validates as `kubernetes_validate.validate(..., strict=True)` does.

The chart and manifest tests validate through the cached copy; were it to drift from the
library (a kubernetes-validate upgrade that names its files or picks its schema otherwise),
they would pass documents the library refuses. Each case here asks both.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest

from tests.support import kubeschemas

LATEST = kubernetes_validate.utils.latest_version()


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "orders"}},
            "template": {
                "metadata": {"labels": {"app": "orders"}},
                "spec": {"containers": [{"name": "consumer", "image": "orders:1"}]},
            },
        },
    }


def hpa(*, tolerance: bool) -> dict[str, Any]:
    """An HPA whose scale-up tolerance only 1.33 and later accept."""
    scale_up: dict[str, Any] = {"stabilizationWindowSeconds": 0}
    if tolerance:
        scale_up["tolerance"] = "0"
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "orders"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "orders"},
            "maxReplicas": 4,
            "behavior": {"scaleUp": scale_up},
        },
    }


def library(body: dict[str, Any], version: str) -> str:
    return kubernetes_validate.validate(copy.deepcopy(body), version, strict=True)


def answer(
    validate: Callable[[dict[str, Any], str], str], body: dict[str, Any], version: str
) -> Any:
    """What ``validate`` says of ``body``: the minor it used, or its refusal as a value."""
    try:
        return validate(body, version)
    except kubernetes_validate.ValidationError as e:
        return (type(e), list(e.path), e.message, e.version)


@pytest.mark.parametrize("version", ["1.27.0", "v1.32", "1.33.0", LATEST])
@pytest.mark.parametrize("tolerance", [False, True])
def test_both_accept_and_refuse_the_same_documents_with_the_same_error(
    version: str, tolerance: bool
) -> None:
    body = hpa(tolerance=tolerance)
    expected = answer(library, body, version)
    assert answer(kubeschemas.validate, body, version) == expected
    # Asked again, from what is kept: the same answer.
    assert answer(kubeschemas.validate, body, version) == expected


def test_the_cases_above_cover_both_outcomes() -> None:
    with pytest.raises(kubernetes_validate.ValidationError, match="tolerance"):
        kubeschemas.validate(hpa(tolerance=True), "1.27.0")
    assert kubeschemas.validate(
        hpa(tolerance=True), LATEST
    ) == kubernetes_validate.utils.major_minor(LATEST)


def test_strict_refuses_an_unknown_field_as_the_library_does() -> None:
    body = deployment()
    body["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError) as ours:
        kubeschemas.validate(body, LATEST)
    with pytest.raises(kubernetes_validate.ValidationError) as theirs:
        library(body, LATEST)
    assert ours.value.message == theirs.value.message
    assert kubeschemas.validate(deployment(), "1.27.0") == library(deployment(), "1.27.0")


def test_an_unknown_kind_and_a_version_past_the_newest_schema_are_refused_alike() -> None:
    unknown = {**deployment(), "kind": "Deploymint"}
    with pytest.raises(kubernetes_validate.SchemaNotFoundError) as ours:
        kubeschemas.validate(unknown, LATEST)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError) as theirs:
        library(unknown, LATEST)
    assert ours.value.message == theirs.value.message
    major, minor = kubernetes_validate.utils.major_minor(LATEST).split(".")
    future = f"{major}.{int(minor) + 1}.0"
    with pytest.raises(kubernetes_validate.utils.VersionNotSupportedError):
        kubeschemas.validate(deployment(), future)
    with pytest.raises(kubernetes_validate.utils.VersionNotSupportedError):
        library(deployment(), future)
