"""The safety invariants over the fake API server's record of every write, audited as the
chaos run audits the local API server's (`eventhub_balancer_devstack.epochledgers`): no
(partition, epoch) given to two pods, and ``status.epochs`` never lower.

What a replica's cache served does not matter here, only what reached the API server.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack import epochledgers

#: The fake's kinds as the API names them in a body.
KINDS = {"configmap": "ConfigMap", "consumer": specs.KIND}


def audit(history: Iterable[tuple[str, dict[str, Any]]]) -> epochledgers.EpochLedger:
    """The ledger fed with every ConfigMap and EventHubConsumer write, in commit order."""
    ledger = epochledgers.EpochLedger()
    ledger.feed(
        epochledgers.Write(type="MODIFIED", body={**body, "kind": KINDS[kind]})
        for kind, body in history
        if kind in KINDS
    )
    return ledger


def assert_safe(history: Iterable[tuple[str, dict[str, Any]]]) -> None:
    ledger = audit(history)
    assert (ledger.epoch_reuse, ledger.epochs_decreased) == (0, 0), ledger.examples
