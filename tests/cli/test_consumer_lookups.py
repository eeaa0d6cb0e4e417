"""`consumerlookups`: a consumer not found in the namespace asked is looked for in the others
the caller may list; a cluster-wide list it may not make leaves the plain message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.cli import consumerlookups


class API:
    """get_consumer finds nothing; list_consumers answers ``listed`` or raises it."""

    def __init__(self, listed: list[tuple[str, str]] | errors.EventHubBalancerError) -> None:
        self.listed = listed

    async def get_consumer(self, *, namespace: str, name: str) -> dict[str, Any]:
        raise errors.NotFound(f"EventHubConsumer {namespace}/{name}: not found")

    async def list_consumers(self, *, namespace: str | None) -> list[dict[str, Any]]:
        assert namespace is None
        if isinstance(self.listed, errors.EventHubBalancerError):
            raise self.listed
        return [{"metadata": {"namespace": ns, "name": n}} for ns, n in self.listed]


def lookup(api: API, namespace: str = "wrong", name: str = "orders") -> str:
    with pytest.raises(errors.NotFound) as caught:
        asyncio.run(consumerlookups.get_consumer(api, namespace=namespace, name=name))
    return str(caught.value)


def test_one_other_namespace_is_named_with_its_flag() -> None:
    assert lookup(API([("shop", "orders"), ("shop", "refunds"), ("billing", "refunds")])) == (
        "EventHubConsumer wrong/orders: not found in namespace wrong; found in namespace shop: "
        "pass -n shop"
    )


def test_many_namespaces_are_named_the_first_few_and_counted() -> None:
    listed = [(f"ns-{i}", "orders") for i in range(5)]
    assert lookup(API(listed)) == (
        "EventHubConsumer wrong/orders: not found in namespace wrong; found in namespaces "
        "ns-0, ns-1, ns-2 and 2 more: pass -n ns-0 or -n ns-1 or -n ns-2 (`ehb status -A` "
        "lists them all)"
    )


@pytest.mark.parametrize(
    "refusal",
    [
        errors.Forbidden("EventHubConsumers: forbidden (no list at cluster scope)"),
        errors.ApiUnavailable("EventHubConsumers: API server answered 503"),
    ],
    ids=["forbidden", "unavailable"],
)
def test_a_cluster_wide_list_refused_leaves_the_plain_message(
    refusal: errors.EventHubBalancerError,
) -> None:
    assert lookup(API(refusal)) == (
        "EventHubConsumer wrong/orders: not found in namespace wrong; `ehb status -n "
        "NAMESPACE` lists the EventHubConsumers of a namespace"
    )


def test_no_crd_says_to_install_it() -> None:
    missing = errors.NotFound("the cluster at https://k serves no EventHubConsumers: install")
    assert lookup(API(missing)) == str(missing)


def test_an_empty_namespace_names_where_the_consumers_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ehb status` in a namespace without consumers (the context's, often default) said only
    "no EventHubConsumers found in namespace default"."""
    from eventhub_balancer import cli
    from eventhub_balancer.adapters import kubeapi

    class Listing:
        def __init__(self, listed: list[tuple[str, str]] | errors.EventHubBalancerError) -> None:
            self.listed = listed

        async def list_consumers(self, *, namespace: str | None) -> list[dict[str, Any]]:
            if namespace is not None:
                return []
            if isinstance(self.listed, errors.EventHubBalancerError):
                raise self.listed
            return [{"metadata": {"namespace": ns, "name": n}} for ns, n in self.listed]

        def close(self) -> None:
            pass

    def status(listed: list[tuple[str, str]] | errors.EventHubBalancerError) -> str:
        monkeypatch.setattr(
            kubeapi.KubeAPI, "from_environment", classmethod(lambda c, k: Listing(listed))
        )
        capsys.readouterr()
        assert cli.main(["status", "-n", "default"]) == 0
        return capsys.readouterr().out.strip()

    assert status([("shop", "orders"), ("shop", "refunds")]) == (
        "no EventHubConsumers found in namespace default; found in namespace shop: pass -n shop"
    )
    assert status([]) == "no EventHubConsumers found in namespace default, nor in any other"
    assert status(errors.Forbidden("EventHubConsumers: forbidden")) == (
        "no EventHubConsumers found in namespace default"
    )
