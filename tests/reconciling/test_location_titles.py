"""Whose a checkpoint location named in several namespaces is: what each consumer's status
says of it first (`conflicts.standing`), its age only between equals."""

from __future__ import annotations

import copy
from typing import Any

from eventhub_balancer.contracts import timestamps
from eventhub_balancer.reconciling import conflicts
from tests.reconciling import bodies
from tests.reconciling.bodies import at

SPEC: dict[str, Any] = copy.deepcopy(bodies.SPEC) | {
    "checkpointStore": {
        "containerName": "checkpoints",
        "accountUrl": "https://acct.blob.core.windows.net",
        "credentials": {"workloadIdentity": {}},
    }
}


def consumer(
    namespace: str,
    *,
    seconds: float,
    generation: int = 1,
    observed: int | None = None,
    conflict: str | None = None,
) -> conflicts.Peer:
    """A consumer naming ``SPEC``'s location, its status as the operator left it."""
    status: dict[str, Any] = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if conflict is not None:
        status["conditions"] = [{"type": conflicts.CONFLICT, "status": conflict}]
    return conflicts.peer(
        {
            "metadata": {
                "name": "c",
                "namespace": namespace,
                "uid": f"uid-{namespace}",
                "generation": generation,
                "creationTimestamp": timestamps.format_time(at(seconds)),
            },
            "spec": SPEC,
            "status": status,
        }
    )


def test_what_a_status_says() -> None:
    assert consumer("a", seconds=0).standing == conflicts.UNDECIDED  # new
    assert consumer("a", seconds=0, observed=1).standing == conflicts.WORKING
    assert consumer("a", seconds=0, observed=1, conflict="False").standing == conflicts.WORKING
    edited = consumer("a", seconds=0, generation=2, observed=1)
    assert edited.standing == conflicts.UNDECIDED
    assert consumer("a", seconds=0, observed=1, conflict="True").standing == conflicts.REFUSED
    refused_then_edited = consumer("a", seconds=0, generation=2, observed=1, conflict="True")
    assert refused_then_edited.standing == conflicts.REFUSED_THEN_CHANGED


def test_a_consumer_at_work_holds_against_an_older_one_edited_to_name_its_location() -> None:
    victim = consumer("victim", seconds=60, observed=1)
    squatter = consumer("squatter", seconds=0, generation=5, observed=4)
    assert conflicts.holder(victim, [squatter]) is None
    assert conflicts.holder(squatter, [victim]) == victim
    # Refused, then edited again and again: still behind the victim, even mid-edit of its own.
    squatter = consumer("squatter", seconds=0, generation=6, observed=5, conflict="True")
    victim = consumer("victim", seconds=60, generation=2, observed=1)
    assert conflicts.holder(victim, [squatter]) is None
    assert conflicts.holder(squatter, [victim]) == victim


def test_between_equals_age_decides() -> None:
    """Both new (or both edited at once, or both at work since before the check): the older
    holds, as it always did; this is where a tenant that came first still wins."""
    for kind in ({}, {"observed": 1}, {"generation": 2, "observed": 1}):
        older, younger = consumer("a", seconds=0, **kind), consumer("b", seconds=10, **kind)
        assert conflicts.holder(younger, [older]) == older
        assert conflicts.holder(older, [younger]) is None
