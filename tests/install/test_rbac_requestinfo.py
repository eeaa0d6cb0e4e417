"""Kubernetes' request-info rules, case by case (the table follows the apiserver's own tests)."""

import pytest

from tests.support.rbac.requestinfo import RequestInfo, request_info


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        (
            "GET",
            "/api/v1/namespaces/shop/pods",
            {},
            RequestInfo(verb="list", api_version="v1", resource="pods", namespace="shop"),
        ),
        (
            "GET",
            "/api/v1/namespaces/shop/pods",
            {"watch": "true"},
            RequestInfo(verb="watch", api_version="v1", resource="pods", namespace="shop"),
        ),
        (
            "GET",
            "/api/v1/namespaces/shop/pods",
            {"watch": "1"},
            RequestInfo(verb="watch", api_version="v1", resource="pods", namespace="shop"),
        ),
        (
            "GET",
            "/api/v1/namespaces/shop/pods",
            {"watch": "false"},
            RequestInfo(verb="list", api_version="v1", resource="pods", namespace="shop"),
        ),
        (
            "GET",
            "/api/v1/pods",
            {"watch": "true"},
            RequestInfo(verb="watch", api_version="v1", resource="pods"),
        ),
        (
            "GET",
            "/api/v1/namespaces/shop/pods/p-1",
            {},
            RequestInfo(
                verb="get", api_version="v1", resource="pods", namespace="shop", name="p-1"
            ),
        ),
        (
            "HEAD",
            "/api/v1/namespaces/shop/pods/p-1",
            {},
            RequestInfo(
                verb="get", api_version="v1", resource="pods", namespace="shop", name="p-1"
            ),
        ),
        (
            "PATCH",
            "/api/v1/namespaces/shop/pods/p-1",
            {},
            RequestInfo(
                verb="patch", api_version="v1", resource="pods", namespace="shop", name="p-1"
            ),
        ),
        (
            "PUT",
            "/api/v1/namespaces/shop/configmaps/c",
            {},
            RequestInfo(
                verb="update", api_version="v1", resource="configmaps", namespace="shop", name="c"
            ),
        ),
        (
            "POST",
            "/api/v1/namespaces/shop/events",
            {},
            RequestInfo(verb="create", api_version="v1", resource="events", namespace="shop"),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/shop/configmaps/c",
            {},
            RequestInfo(
                verb="delete", api_version="v1", resource="configmaps", namespace="shop", name="c"
            ),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/shop/configmaps",
            {},
            RequestInfo(
                verb="deletecollection", api_version="v1", resource="configmaps", namespace="shop"
            ),
        ),
        (
            "PATCH",
            "/apis/eventhub-balancer.dev/v1alpha1/namespaces/shop/eventhubconsumers/orders/status",
            {},
            RequestInfo(
                verb="patch",
                api_group="eventhub-balancer.dev",
                api_version="v1alpha1",
                resource="eventhubconsumers",
                subresource="status",
                namespace="shop",
                name="orders",
            ),
        ),
        (
            "GET",
            "/apis/eventhub-balancer.dev/v1alpha1/eventhubconsumers",
            {"watch": "true"},
            RequestInfo(
                verb="watch",
                api_group="eventhub-balancer.dev",
                api_version="v1alpha1",
                resource="eventhubconsumers",
            ),
        ),
        (
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            {},
            RequestInfo(
                verb="list",
                api_group="apiextensions.k8s.io",
                api_version="v1",
                resource="customresourcedefinitions",
            ),
        ),
        # A list or watch pinned to one name by a field selector is authorized for that name.
        (
            "GET",
            "/api/v1/namespaces/shop/configmaps",
            {"watch": "true", "fieldSelector": "metadata.name=ehb-orders-p-1"},
            RequestInfo(
                verb="watch",
                api_version="v1",
                resource="configmaps",
                namespace="shop",
                name="ehb-orders-p-1",
            ),
        ),
        (
            "GET",
            "/api/v1/namespaces/shop/configmaps",
            {"fieldSelector": "metadata.name!=x"},
            RequestInfo(verb="list", api_version="v1", resource="configmaps", namespace="shop"),
        ),
        # The deprecated watch path.
        (
            "GET",
            "/api/v1/watch/namespaces/shop/pods",
            {},
            RequestInfo(verb="watch", api_version="v1", resource="pods", namespace="shop"),
        ),
        # Namespaces: the object itself and its subresources.
        (
            "GET",
            "/api/v1/namespaces",
            {},
            RequestInfo(verb="list", api_version="v1", resource="namespaces"),
        ),
        (
            "GET",
            "/api/v1/namespaces/shop",
            {},
            RequestInfo(
                verb="get", api_version="v1", resource="namespaces", namespace="shop", name="shop"
            ),
        ),
        (
            "PUT",
            "/api/v1/namespaces/shop/finalize",
            {},
            RequestInfo(
                verb="update",
                api_version="v1",
                resource="namespaces",
                subresource="finalize",
                namespace="shop",
                name="shop",
            ),
        ),
        # Discovery and other non-resource paths.
        ("GET", "/api", {}, RequestInfo(verb="get", path="/api")),
        ("GET", "/api/v1", {}, RequestInfo(verb="get", path="/api/v1")),
        ("GET", "/apis", {}, RequestInfo(verb="get", path="/apis")),
        ("GET", "/apis/kopf.dev", {}, RequestInfo(verb="get", path="/apis/kopf.dev")),
        ("GET", "/apis/kopf.dev/v1", {}, RequestInfo(verb="get", path="/apis/kopf.dev/v1")),
        ("GET", "/version", {}, RequestInfo(verb="get", path="/version")),
        ("POST", "/healthz", {}, RequestInfo(verb="post", path="/healthz")),
    ],
)
def test_request_info(method: str, path: str, query: dict[str, str], expected: RequestInfo) -> None:
    assert request_info(method, path, query) == expected


def test_descriptions_name_what_rbac_checks() -> None:
    info = request_info(
        "PATCH",
        "/apis/eventhub-balancer.dev/v1alpha1/namespaces/shop/eventhubconsumers/orders/status",
    )
    assert (
        info.describe() == "patch eventhubconsumers/status.eventhub-balancer.dev 'orders' in shop"
    )
    assert request_info("GET", "/api/v1/namespaces").describe() == "list namespaces (cluster)"
    assert request_info("GET", "/version").describe() == "get /version"
