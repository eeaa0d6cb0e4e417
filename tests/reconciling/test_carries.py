"""The record and the writes a decision carries are taken again only for the same inputs.

`decisions.read_record` serves the record read from the very CR body at the same uid and
resourceVersion, and reads any other body afresh; `decisions.derive` serves the writes derived
from the very same fleet and equal arguments, and derives afresh otherwise. Through
`deciding.decide`, a cycle's second decision (with the blobs) takes the first one's writes,
and every decision equals the one taken cold.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from eventhub_balancer.balancing import models
from eventhub_balancer.reconciling import deciding, decisions, records, writes
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[object]:
    """Each call of ``module.name`` from now on, by its first argument or keyword."""
    calls: list[object] = []
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0] if args else kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def recorded_body(*, version: str, epoch: int = 3) -> Any:
    return {
        "metadata": {"name": bodies.NAME, "uid": "uid-ehc", "resourceVersion": version},
        "status": {
            "assignment": [
                {"partition": "0", "pod": "a", "podUid": "uid-a", "epoch": epoch, "state": "owned"}
            ]
        },
    }


def test_the_same_body_at_the_same_version_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch, records, "read")
    body = recorded_body(version="7")
    first = decisions.read_record(None, body)
    assert decisions.read_record(first, body) is first
    assert len(calls) == 1
    assert dict(first.recorded) == records.read(body["status"])


def test_a_new_resource_version_reads_the_record_again() -> None:
    body = recorded_body(version="7")
    first = decisions.read_record(None, body)
    # Even the same object: a body changed in place at a new version is not the one read.
    body["metadata"]["resourceVersion"] = "8"
    body["status"]["assignment"][0]["epoch"] = 4
    again = decisions.read_record(first, body)
    assert again is not first
    assert again.recorded[models.PartitionId("0")].epoch == 4


def test_an_equal_copy_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    body = recorded_body(version="7")
    first = decisions.read_record(None, body)
    calls = counting(monkeypatch, records, "read")
    again = decisions.read_record(first, copy.deepcopy(body))
    assert again is not first
    assert len(calls) == 1
    assert again.recorded == first.recorded


def test_another_consumer_under_the_same_version_is_read_again() -> None:
    body = recorded_body(version="7")
    first = decisions.read_record(None, body)
    body["metadata"]["uid"] = "uid-other"
    assert decisions.read_record(first, body) is not first


def derived_arguments() -> dict[str, Any]:
    """What `writes.derive` takes, for a decided consumer of two pods."""
    observation = bodies.observe(pods=[pod("a"), pod("b")], checkpoints={})
    decision, carry = deciding.decide(observation, None, now=at(0))
    observation = bodies.applied(observation, decision)
    _, carry = deciding.decide(observation, carry, now=at(1))
    assert observation.spec is not None
    assert carry.fleet is not None
    owned = models.Ownership(owner=models.MemberName("a"), epoch=1, since=0.0)
    return {
        "fleet": carry.fleet,
        "spec": observation.spec,
        "consumer": bodies.NAME,
        "namespace": bodies.NS,
        "assignment": {models.PartitionId(p): owned for p in bodies.IDS},
        "problems": {},
        "annotate_pods": False,
    }


def test_the_same_arguments_are_derived_once(monkeypatch: pytest.MonkeyPatch) -> None:
    arguments = derived_arguments()
    calls = counting(monkeypatch, writes, "derive")
    first = decisions.derive(None, **arguments)
    equal = {**arguments, "assignment": dict(arguments["assignment"])}
    assert decisions.derive(first, **equal) is first
    assert len(calls) == 1
    assert first.writes == writes.derive(**arguments)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda a: {
                **a,
                "assignment": {
                    **a["assignment"],
                    models.PartitionId("0"): models.Ownership(
                        owner=models.MemberName("b"), epoch=2, since=1.0
                    ),
                },
            },
            id="assignment",
        ),
        pytest.param(lambda a: {**a, "fleet": dataclasses.replace(a["fleet"])}, id="fleet"),
        pytest.param(lambda a: {**a, "problems": {"ehb-orders-a": ("x",)}}, id="problems"),
        pytest.param(lambda a: {**a, "annotate_pods": True}, id="annotate_pods"),
        pytest.param(
            lambda a: {**a, "spec": dataclasses.replace(a["spec"], consumer_group="other")},
            id="spec",
        ),
    ],
)
def test_other_arguments_are_derived_afresh(change: Any) -> None:
    arguments = derived_arguments()
    first = decisions.derive(None, **arguments)
    changed = change(arguments)
    again = decisions.derive(first, **changed)
    assert again is not first
    assert again.writes == writes.derive(**changed)


def test_the_second_decision_of_a_cycle_takes_the_first_ones_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")])
    first, carry = deciding.decide(observation, None, now=at(0))
    assert first.needs_checkpoints
    assert carry.derived is not None
    calls = counting(monkeypatch, writes, "derive")
    with_blobs = bodies.read_blobs(observation, {})
    second, carry = deciding.decide(with_blobs, carry, now=at(0))
    assert calls == []
    assert second == bodies.decide(with_blobs, now=at(0))
    # Nothing more to read: the next decision is another cycle's, and derives afresh.
    assert carry.derived is None


def test_blobs_that_raise_an_epoch_derive_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")])
    _, carry = deciding.decide(observation, None, now=at(0))
    calls = counting(monkeypatch, writes, "derive")
    with_blobs = bodies.read_blobs(observation, {"0": (5, 10)})
    second, _ = deciding.decide(with_blobs, carry, now=at(0))
    assert len(calls) == 1
    assert second == bodies.decide(with_blobs, now=at(0))


def test_a_new_status_is_read_again_by_the_next_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")], checkpoints={})
    decision, carry = deciding.decide(observation, None, now=at(0))
    observation = bodies.applied(observation, decision)
    _, carry = deciding.decide(observation, carry, now=at(1))
    calls = counting(monkeypatch, records, "read")
    _, same = deciding.decide(observation, carry, now=at(2))
    assert calls == []
    assert same.record is carry.record
    # The CR as the API hands it out after a write: another object, another version.
    body: Any = copy.deepcopy(observation.body)
    body["metadata"]["resourceVersion"] = "2"
    body["status"]["assignment"][0]["epoch"] += 1
    changed = dataclasses.replace(observation, body=body)
    decision, carry = deciding.decide(changed, carry, now=at(2))
    assert len(calls) == 1
    assert decision == bodies.decide(changed, now=at(2))
