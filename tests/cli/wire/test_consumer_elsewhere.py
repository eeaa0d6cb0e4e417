"""``ehb status NAME -n wrong`` on the local API: it said only "EventHubConsumer wrong/orders:
not found", with nothing of where the consumer is or how to find it. It now names the
namespaces that hold a consumer of that name, or says that none does and how to list them;
``ehb deadletters`` and ``ehb checkpoints`` find the consumer the same way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhub_balancer import cli
from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.cli.wire.test_consumer_namespaces import SPEC

RESOURCE = f"{specs.GROUP}/{specs.VERSION}/{specs.PLURAL}"


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    with LocalKubeAPI() as api:
        for namespace in ("shop", "billing"):
            body = {
                "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
                "kind": specs.KIND,
                "metadata": {"name": "orders", "namespace": namespace},
                "spec": SPEC,
            }
            api.create_object(RESOURCE, body, namespace=namespace)
        yield api.write_kubeconfig(tmp_path / "kubeconfig")


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert cli.main(list(argv)) == 1
    (line,) = capsys.readouterr().err.splitlines()
    return line


def test_a_consumer_in_other_namespaces_is_named_with_the_flag_to_pass(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--kubeconfig", str(kubeconfig)]
    assert error_of(capsys, "status", "orders", "-n", "wrong", *config) == (
        "ehb: error: EventHubConsumer wrong/orders: not found in namespace wrong; found in "
        "namespaces billing and shop: pass -n billing or -n shop"
    )
    assert error_of(capsys, "deadletters", "list", "orders", "-n", "wrong", *config) == (
        "ehb: error: EventHubConsumer wrong/orders: not found in namespace wrong; found in "
        "namespaces billing and shop: pass -n billing or -n shop"
    )
    capsys.readouterr()
    assert cli.main(["status", "orders", "-n", "shop", *config]) == 0
    assert capsys.readouterr().out.startswith("shop/orders: ")
    # Without a NAME, an empty namespace says where the consumers are.
    assert cli.main(["status", "-n", "wrong", *config]) == 0
    assert capsys.readouterr().out == (
        "no EventHubConsumers found in namespace wrong; found in namespaces billing and shop: "
        "pass -n billing or -n shop\n"
    )


def test_a_name_no_namespace_holds_says_how_to_list_the_consumers(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert error_of(capsys, "status", "order", "-n", "shop", "--kubeconfig", str(kubeconfig)) == (
        "ehb: error: EventHubConsumer shop/order: not found in namespace shop, nor in any "
        "other; `ehb status -n shop` lists the EventHubConsumers there, `ehb status -A` "
        "those of every namespace"
    )
