"""The chaos run's epoch audit on synthetic write records: epochs given to two pods, and
``status.epochs`` going down, counted from committed writes in commit order."""

from __future__ import annotations

import json
from typing import Any

from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack import epochledgers

NAMESPACE = "shop"


def _configmap(
    pod: str, partitions: dict[str, tuple[int, str]], *, consumer: str = "orders"
) -> epochledgers.Write:
    data = {
        configmaps.KEY_CONSUMER: consumer,
        configmaps.KEY_POD: pod,
        configmaps.KEY_GENERATION: "1",
        configmaps.KEY_PARTITIONS: json.dumps(
            {p: {"epoch": epoch, "state": state} for p, (epoch, state) in partitions.items()}
        ),
    }
    body = {
        "kind": "ConfigMap",
        "metadata": {"name": f"{consumer}-{pod}", "namespace": NAMESPACE},
        "data": data,
    }
    return epochledgers.Write(type="MODIFIED", body=body)


def _status(epochs: dict[str, Any], *, uid: str = "uid-1") -> epochledgers.Write:
    body = {
        "kind": "EventHubConsumer",
        "metadata": {"name": "orders", "namespace": NAMESPACE, "uid": uid},
        "status": {"epochs": epochs},
    }
    return epochledgers.Write(type="MODIFIED", body=body)


def _audit(*writes: epochledgers.Write) -> epochledgers.EpochLedger:
    ledger = epochledgers.EpochLedger()
    ledger.feed(writes)
    return ledger


def test_the_issue_scenario_counts_one_reuse_and_one_decrease() -> None:
    # status.epochs goes 3 -> 2 and pod d is given partition 0 at epoch 3, which c held.
    ledger = _audit(
        _status({"0": 3}),
        _configmap("c", {"0": (3, "owned")}),
        _status({"0": 2}),
        _configmap("d", {"0": (3, "owned")}),
    )
    assert ledger.epoch_reuse == 1
    assert ledger.epochs_decreased == 1
    assert ledger.writes == 4
    assert any("given to c and to d" in text for text in ledger.examples)
    assert any("3 -> 2" in text for text in ledger.examples)


def test_an_ordered_handoff_reuses_nothing() -> None:
    ledger = _audit(
        _status({"0": 3, "1": 1}),
        _configmap("c", {"0": (3, "owned"), "1": (1, "owned")}),
        _configmap("c", {"0": (3, "owned"), "1": (1, "owned")}),  # rewritten, same owner
        _configmap("c", {"0": (3, "revoking"), "1": (1, "owned")}),
        _status({"0": 4, "1": 1}),
        _configmap("c", {"1": (1, "owned")}),
        _configmap("d", {"0": (4, "owned")}),
    )
    assert (ledger.epoch_reuse, ledger.epochs_decreased) == (0, 0)


def test_a_pair_given_many_times_counts_once_and_only_owned_entries_count() -> None:
    ledger = _audit(
        _configmap("c", {"0": (3, "owned")}),
        _configmap("d", {"0": (3, "owned")}),
        _configmap("e", {"0": (3, "owned")}),
        _configmap("d", {"0": (3, "owned")}),
        # Revoking is not a grant: the old owner keeps its epoch while it releases.
        _configmap("f", {"1": (5, "revoking")}),
        _configmap("g", {"1": (5, "owned")}),
    )
    assert ledger.epoch_reuse == 1


def test_epochs_are_scoped_to_their_consumer() -> None:
    ledger = _audit(
        _configmap("c", {"0": (3, "owned")}, consumer="orders"),
        _configmap("d", {"0": (3, "owned")}, consumer="payments"),
        _status({"0": 3}, uid="uid-1"),
        _status({"0": 1}, uid="uid-2"),  # a new CR of the same name starts again
    )
    assert (ledger.epoch_reuse, ledger.epochs_decreased) == (0, 0)


def test_a_decrease_is_against_the_highest_epoch_ever_committed() -> None:
    ledger = _audit(
        _status({"0": 5, "1": 2}),
        _status({"1": 2}),  # partition 0 left the record
        _status({"0": 4, "1": 2}),  # and came back lower
        _status({"0": 5, "1": 1}),
    )
    assert ledger.epochs_decreased == 2


def test_deletions_other_objects_and_unreadable_entries_are_not_grants() -> None:
    deleted = _configmap("d", {"0": (3, "owned")})
    ledger = _audit(
        _configmap("c", {"0": (3, "owned")}),
        epochledgers.Write(type="DELETED", body=deleted.body),
        epochledgers.Write(type="ADDED", body={"kind": "ConfigMap", "data": {"x": "y"}}),
        epochledgers.Write(type="ADDED", body={"kind": "Pod", "metadata": {"name": "p"}}),
        _status({"0": "three", "1": True}),
    )
    assert (ledger.epoch_reuse, ledger.epochs_decreased) == (0, 0)
    assert ledger.writes == 2
