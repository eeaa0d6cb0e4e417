"""A 403 met by an admin command is the right of the kubeconfig's user that is missing, not
the operator's: the one error line must not send the admin to grant the operator's
ServiceAccount access, which changes nothing for ``ehb status`` or ``ehb checkpoints``.

The API's refusal is built as the Kubernetes client raises it and wrapped by the adapter the
commands use (`kubeclients`), so the line is the one a cluster's RBAC gives.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer.adapters import kubeclients
from tests.support import pausedconsumers
from tests.support.pausedconsumers import ehb

REFUSAL = (
    'eventhubconsumers.eventhub-balancer.dev "orders" is forbidden: User "alice" cannot get '
    'resource "eventhubconsumers" in API group "eventhub-balancer.dev" in the namespace "shop"'
)


@pytest.mark.parametrize(
    "command",
    [
        ["status", "orders"],
        ["checkpoints", "list", "orders"],
        ["checkpoints", "export", "orders"],
        ["checkpoints", "reset", "orders", "--to-latest"],
        ["deadletters", "list", "orders"],
    ],
)
def test_a_refused_read_asks_for_the_users_right(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    consumer = pausedconsumers.install(monkeypatch)

    async def forbidden(*, namespace: str, name: str) -> Any:
        refusal = kube_exceptions.ApiException(status=403, reason="Forbidden")
        refusal.body = json.dumps({"message": REFUSAL})
        raise kubeclients._wrap(refusal, f"EventHubConsumer {namespace}/{name}")

    monkeypatch.setattr(consumer.kube, "get_consumer", forbidden)
    status, out, err = ehb(capsys, *command, "-n", "shop")
    assert (status, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith(f"ehb: error: EventHubConsumer shop/orders: forbidden ({REFUSAL})")
    assert "grant the operator's ServiceAccount" not in line
    assert "your kubeconfig's user" in line
