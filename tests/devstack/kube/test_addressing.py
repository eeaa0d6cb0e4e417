import pytest

from eventhub_balancer_devstack.kube import addressing
from eventhub_balancer_devstack.kube.addressing import Address


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1", Address(group="", version="v1")),
        ("/apis/kopf.dev", Address(group="kopf.dev")),
        ("/api/v1/namespaces", Address(group="", version="v1", plural="namespaces")),
        (
            "/api/v1/namespaces/ns1",
            Address(group="", version="v1", plural="namespaces", name="ns1"),
        ),
        (
            "/api/v1/namespaces/ns1/status",
            Address(group="", version="v1", plural="namespaces", name="ns1", subresource="status"),
        ),
        (
            "/api/v1/namespaces/ns1/pods",
            Address(group="", version="v1", plural="pods", namespace="ns1"),
        ),
        (
            "/api/v1/namespaces/ns1/pods/p/status",
            Address(
                group="",
                version="v1",
                plural="pods",
                namespace="ns1",
                name="p",
                subresource="status",
            ),
        ),
        ("/api/v1/pods", Address(group="", version="v1", plural="pods")),
        (
            "/apis/g.dev/v1alpha1/namespaces/n/things/t",
            Address(group="g.dev", version="v1alpha1", plural="things", namespace="n", name="t"),
        ),
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.g.dev",
            Address(
                group="apiextensions.k8s.io",
                version="v1",
                plural="customresourcedefinitions",
                name="x.g.dev",
            ),
        ),
    ],
)
def test_paths(path: str, expected: Address) -> None:
    assert addressing.parse(path) == expected


def test_non_api_paths() -> None:
    assert addressing.parse("/version") is None
    assert addressing.parse("/") is None
