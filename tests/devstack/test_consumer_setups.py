"""``ehb local up --consumer NAMESPACE/NAME``: a name Kubernetes refuses is said before anything
starts, in one line that names the flag (exit status 2).

``--consumer Shop/orders`` started the emulator, Azurite and the Kubernetes API, printed them
as up, and then ended in the local API's stack trace (``Namespace "Shop" is invalid``) when it
created the Secrets; a name of the consumer the API takes but kubectl then refuses went on to
print a ``kubectl apply`` that could only fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from eventhub_balancer import cli
from eventhub_balancer_devstack import consumersetups, stacks

FREE_PORTS = ["--eventhubs-port=0", "--blob-port=0", "--kube-port=0"]


def started(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError("the stack started")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Shop/orders", "--consumer: 'Shop/orders': the namespace 'Shop' must be"),
        ("shop.eu/orders", "--consumer: 'shop.eu/orders': the namespace 'shop.eu' must be"),
        ("shop/Orders", "--consumer: 'shop/Orders': the name 'Orders' must be"),
        ("shop/orders_1", "--consumer: 'shop/orders_1': the name 'orders_1' must be"),
        ("shop/orders/eu", "--consumer: 'shop/orders/eu': the name 'orders/eu' must be"),
        ("shop", "--consumer: 'shop': give NAMESPACE/NAME"),
    ],
)
def test_a_consumer_kubernetes_would_refuse_is_named_before_the_stack_starts(
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(stacks.LocalStack, "start", started)
    assert cli.main(["local", "up", *FREE_PORTS, "--consumer", value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"ehb: error: {message}")


def test_a_consumer_kubernetes_takes_starts_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stacks.LocalStack, "start", started)
    with pytest.raises(AssertionError, match="the stack started"):
        cli.main(["local", "up", *FREE_PORTS, "--consumer", "shop-eu/orders.v2"])


def test_consumers_of_one_hub_each_read_a_group_of_their_own() -> None:
    hubs = {"orders": 4, "billing": 2}
    setups = consumersetups.parse_all(
        ["shop/orders", "lab/orders", "shop/billing", "shop/audit"], hubs
    )
    assert [(s.hub, s.consumer_group) for s in setups] == [
        ("orders", "$Default"),
        ("orders", "lab.orders"),
        ("billing", "$Default"),
        ("orders", "shop.audit"),  # no hub of its name: the first hub's
    ]
    long = consumersetups.parse_all(["a/" + "x" * 60, "b/" + "x" * 60, "c/" + "x" * 60], hubs)
    groups = [s.consumer_group for s in long[1:]]
    assert all(len(g) <= consumersetups.CONSUMER_GROUP_MAX for g in groups)
    assert len(set(groups)) == 2


def test_one_consumer_given_twice_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stacks.LocalStack, "start", started)
    argv = ["local", "up", *FREE_PORTS, "--consumer", "shop/orders", "--consumer", "shop/orders"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        "ehb: error: --consumer: 'shop/orders' is given twice: give it once"
    ]


def test_one_operator_is_printed_for_every_namespace(tmp_path: Path) -> None:
    """One operator line a consumer: the second of them, run as printed on the same machine,
    stopped on the first one's metrics port."""
    setups = consumersetups.parse_all(["shop/orders", "lab/orders", "shop/audit"], {"orders": 4})
    assert consumersetups.operator_command(tmp_path / "kubeconfig", setups) == (
        f"KUBECONFIG={tmp_path}/kubeconfig ehb operator --namespace shop --namespace lab "
        "--standalone --allow-development-endpoints"
    )
