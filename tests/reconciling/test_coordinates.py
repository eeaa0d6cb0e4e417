"""A spec change of what the pods read reaches every pod by hand-off with higher epochs, and
partitions that vanished with the old hub leave the assignment and ``status.epochs``."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.reconciling import coordinates, observations, writes
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def started(*pods: dict[str, Any]) -> observations.Observation:
    """Two cycles in: every partition assigned (epoch 1), written and read back."""
    first, decision = bodies.decide_fully(bodies.observe(pods=pods), now=at(0))
    return bodies.applied(first, decision)


def respec(
    observation: observations.Observation, spec: dict[str, Any], *, ids: tuple[str, ...] = ()
) -> observations.Observation:
    """A user's edit of the spec (the generation goes up), and the new hub's partitions."""
    body: Any = copy.deepcopy(observation.body)
    body["spec"] = copy.deepcopy(spec)
    body["metadata"]["generation"] += 1
    hub = observations.HubRead(ids=ids) if ids else observation.hub
    return dataclasses.replace(observation, body=body, spec=specs.parse_spec(spec), hub=hub)


def with_hub(**changes: str) -> dict[str, Any]:
    spec = copy.deepcopy(bodies.SPEC)
    spec["eventHub"].update(changes)
    return spec


def coordinates_of(observation: observations.Observation) -> set[tuple[str, str, str]]:
    return {
        (
            cm["data"][configmaps.KEY_FQNS],
            cm["data"][configmaps.KEY_EVENTHUB],
            cm["data"][configmaps.KEY_CONTAINER],
        )
        for cm in observation.configmaps
    }


def test_a_new_hub_moves_every_partition_by_hand_off_with_higher_epochs() -> None:
    observation = respec(started(pod("a"), pod("b")), with_hub(name="payments"))
    first = bodies.decide(observation, now=at(10))
    assert first.needs_checkpoints  # new epochs: the blobs at the new place are a floor
    observation, decision = bodies.decide_fully(observation, now=at(10))
    assert decision.epochs == {"0": 2, "1": 2, "2": 2, "3": 2}
    assert decision.moves == ()  # the owners stay: each pod hands off to itself
    [event] = [e for e in decision.events if e.reason == coordinates.REASON]
    assert "eventHub.name" in event.message
    assert "4 partitions on 2 pods" in event.message
    after = bodies.applied(observation, decision)
    assert bodies.assignment(after) == {
        "a": {"0": (2, "owned"), "1": (2, "owned")},
        "b": {"2": (2, "owned"), "3": (2, "owned")},
    }
    assert coordinates_of(after) == {("shop.servicebus.windows.net", "payments", "checkpoints")}
    # Done: the next cycle raises nothing, writes nothing and says nothing.
    again = bodies.decide(after, now=at(15))
    assert (again.epochs, again.writes.count, again.events) == (None, 0, ())


def test_a_cycle_that_failed_after_the_epochs_raises_nothing_twice() -> None:
    observation = respec(started(pod("a"), pod("b")), with_hub(consumerGroup="audit"))
    observation, decision = bodies.decide_fully(observation, now=at(10))
    assert decision.epochs == {"0": 2, "1": 2, "2": 2, "3": 2}
    # Only the epochs and the record were written (then every ConfigMap write failed, or
    # the operator restarted): the pods still read the old consumer group.
    half = bodies.applied(observation, dataclasses.replace(decision, writes=writes.Writes()))
    assert {cm["data"][configmaps.KEY_CONSUMER_GROUP] for cm in half.configmaps} == {"$Default"}
    retry = bodies.decide(half, now=at(11))
    assert retry.epochs is None
    assert [e.reason for e in retry.events if e.reason == coordinates.REASON] == []
    done = bodies.applied(half, retry)
    assert bodies.assignment(done)["a"] == {"0": (2, "owned"), "1": (2, "owned")}
    assert {cm["data"][configmaps.KEY_CONSUMER_GROUP] for cm in done.configmaps} == {"audit"}


@pytest.mark.parametrize(
    "change",
    [
        {"eventHub": {"fullyQualifiedNamespace": "other.servicebus.windows.net"}},
        {"eventHub": {"name": "payments"}},
        {"eventHub": {"consumerGroup": "audit"}},
        {"checkpointStore": {"containerName": "elsewhere"}},
        {
            "checkpointStore": {
                "accountUrl": "https://acct.blob.core.windows.net",
                "credentials": {"workloadIdentity": {}},
            }
        },
        {
            "checkpointStore": {
                "credentials": {"connectionStringSecretRef": {"name": "b2", "key": "cs"}}
            }
        },
        {"startPosition": "latest"},
    ],
    ids=["namespace", "hub", "group", "container", "account", "store-secret", "start"],
)
def test_each_coordinate_raises_the_epochs(change: dict[str, Any]) -> None:
    spec = copy.deepcopy(bodies.SPEC)
    for key, value in change.items():
        if isinstance(value, dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    observation = respec(started(pod("a")), spec)
    _, decision = bodies.decide_fully(observation, now=at(10))
    assert decision.epochs == {"0": 2, "1": 2, "2": 2, "3": 2}


def test_a_change_of_anything_else_raises_no_epoch() -> None:
    spec = {**bodies.SPEC, "balancing": {"intervalSeconds": 7}, "processing": {"maxAttempts": 3}}
    _, decision = bodies.decide_fully(respec(started(pod("a")), spec), now=at(10))
    assert decision.epochs is None
    assert decision.writes.count == 1  # the ConfigMap carries the new policy, same epochs


def test_a_revoking_partition_keeps_its_epoch_for_its_hand_off() -> None:
    observation = started(pod("a"))
    observation = bodies.applied(
        observation, bodies.decide_fully(bodies.with_pods(observation, pod("b")), now=at(5))[1]
    )
    assert bodies.assignment(observation)["a"] == {
        "0": (1, "owned"),
        "1": (1, "owned"),
        "2": (1, "revoking"),
        "3": (1, "revoking"),
    }
    _, decision = bodies.decide_fully(respec(observation, with_hub(name="payments")), now=at(6))
    assert decision.epochs is not None
    assert (decision.epochs["0"], decision.epochs["2"]) == (2, 1)


def test_partitions_the_new_hub_lacks_leave_the_assignment_and_keep_their_epochs() -> None:
    observation = respec(started(pod("a"), pod("b")), with_hub(name="small"), ids=("0", "1"))
    observation, decision = bodies.decide_fully(observation, now=at(10))
    assert decision.partitions == ("0", "1")
    assert decision.unlisted == ()
    after = bodies.applied(observation, decision)
    # Two partitions over two pods again: one is handed over (ordered, after the new epoch).
    assert bodies.assignment(after) == {"a": {"0": (2, "owned"), "1": (2, "revoking")}, "b": {}}
    # The epochs of "2" and "3" stay: should the old hub come back, they are never reused.
    assert after.status.get("epochs") == {"0": 2, "1": 2, "2": 1, "3": 1}
    assert {e["partition"] for e in after.status.get("assignment") or []} == {"0", "1"}
    after, again = bodies.decide_fully(bodies.acknowledged(after, "a"), now=at(15))
    assert again.partitions == ("0", "1")
    done = bodies.applied(after, again)
    assert bodies.assignment(done) == {"a": {"0": (2, "owned")}, "b": {"1": (3, "owned")}}
    assert done.status.get("epochs") == {"0": 2, "1": 3, "2": 1, "3": 1}


def test_a_shorter_list_from_the_same_hub_keeps_what_is_owned_and_every_epoch() -> None:
    observation = started(pod("a"), pod("b"))
    body: Any = copy.deepcopy(observation.body)
    body["status"]["epochs"]["9"] = 4  # an unowned partition's epoch the hub does not list
    shorter = dataclasses.replace(observation, body=body, hub=observations.HubRead(ids=("0", "1")))
    decision = bodies.decide(shorter, now=at(5))
    assert decision.unlisted == ("2", "3")  # owned: a wrong answer never revokes
    assert decision.moves == ()  # and "9" is given to nobody
    assert "epochs" not in decision.status  # and its epoch is not forgotten


def test_epochs_are_kept_while_the_hub_cannot_be_listed() -> None:
    observation = started(pod("a"))
    body: Any = copy.deepcopy(observation.body)
    body["status"]["epochs"]["9"] = 4
    fault = observations.Fault(reason="EventHubUnreachable", message="timeout")
    failing = dataclasses.replace(
        observation, body=body, hub=observations.HubRead(ids=("0", "1"), fault=fault)
    )
    decision = bodies.decide(failing, now=at(5))
    assert "epochs" not in decision.status


def test_a_gone_pods_configmap_raises_nothing_but_its_partitions_move() -> None:
    observation = started(pod("a"), pod("b"))
    observation = dataclasses.replace(
        observation, pods=tuple(p for p in observation.pods if p["metadata"]["name"] == "a")
    )
    observation, decision = bodies.decide_fully(
        respec(observation, with_hub(name="payments")), now=at(10)
    )
    assert decision.epochs == {"0": 2, "1": 2, "2": 2, "3": 2}
    [event] = [e for e in decision.events if e.reason == coordinates.REASON]
    assert "2 partitions on 1 pod " in event.message


def test_a_configmap_that_does_not_say_a_coordinate_moves_nothing() -> None:
    """An older operator's ConfigMap (no key for the store's Secret or the start position):
    what it does not say is not a change, so an upgrade hands nothing off."""
    observation = started(pod("a"))
    maps = []
    for cm in observation.configmaps:
        cm = copy.deepcopy(dict(cm))
        del cm["data"][configmaps.KEY_CHECKPOINT_CREDENTIALS]
        del cm["data"][configmaps.KEY_START_POSITION]
        maps.append(cm)
    older = dataclasses.replace(observation, configmaps=tuple(maps))
    _, decision = bodies.decide_fully(older, now=at(5))
    assert decision.epochs is None
    assert [e.reason for e in decision.events if e.reason == coordinates.REASON] == []
