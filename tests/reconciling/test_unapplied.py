"""A pod that holds partitions but never acknowledges its assignment: Ready must not say
that every partition is owned.

The selector matches a workload that is not a consumer (``app: orders`` on the producer's
pods too), whose pods are Ready, are given partitions and read none of them; or the consumer
pods cannot patch their ConfigMaps, and process their partitions without a way to say so: the
operator cannot tell the two apart. A consumer pod applies its
ConfigMap within a second (`ehb consume` acknowledges with the annotation
``eventhub-balancer.dev/applied-generation``).

Pure: observations built from bodies, decided with a fixed ``now``.
"""

from __future__ import annotations

import copy
import dataclasses

from eventhub_balancer.contracts import configmaps, podstates
from eventhub_balancer.reconciling import observations, silentowners
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def ready_at(observation: observations.Observation, seconds: float) -> tuple[str, str, str]:
    decision = bodies.decide(observation, now=at(seconds))
    found = {c["type"]: c for c in bodies.applied(observation, decision).status["conditions"]}
    return found["Ready"]["status"], found["Ready"]["reason"], found["Ready"]["message"]


def given_out() -> observations.Observation:
    """Pods a (a consumer) and b (not one) each given two partitions at 0; a applied its own."""
    observation = bodies.observe(pods=[pod("a"), pod("b")])
    seen, decision = bodies.decide_fully(observation, now=at(0))
    after = bodies.applied(seen, decision)
    assert bodies.assignment(after) == {
        "a": {"0": (1, "owned"), "1": (1, "owned")},
        "b": {"2": (1, "owned"), "3": (1, "owned")},
    }
    return bodies.applying(after, "a")


def test_a_ready_pod_that_never_applies_its_assignment_makes_ready_false() -> None:
    after = given_out()
    # Within the limit, b may still be on its way: Ready as before.
    assert ready_at(after, 5)[:2] == ("True", "AllPartitionsOwned")
    status, reason, message = ready_at(after, silentowners.UNAPPLIED_SECONDS + 1)
    assert (status, reason) == ("False", "AssignmentNotApplied")
    # What to change, with the pod named and what it holds.
    assert message.startswith(
        "pod b holds 2 of 4 partitions but has not applied its assignment ConfigMap within "
        "60 s: no acknowledgement says they are read."
    )
    assert "spec.selector (app=c)" in message
    # A Ready pod has read its ConfigMap (it is NotReady until it has, and while it may not):
    # only the acknowledgement's patch can be what its ServiceAccount lacks.
    assert "ServiceAccount lacks patch on configmaps" in message
    assert "list" not in message
    assert "watch" not in message
    # It waits for a person: Stalled, which kstatus and Argo CD read.
    decision = bodies.decide(after, now=at(61))
    found = {c["type"]: c for c in bodies.applied(after, decision).status["conditions"]}
    assert (found["Stalled"]["status"], found["Stalled"]["reason"]) == (
        "True",
        "AssignmentNotApplied",
    )
    # One Warning when it starts, none while it stands.
    assert [(e.reason, e.type) for e in decision.events] == [("AssignmentNotApplied", "Warning")]
    again = bodies.decide(bodies.applied(after, decision), now=at(66))
    assert again.events == ()
    assert again.status == {}


def test_the_decision_comes_back_when_the_silence_comes_due() -> None:
    decision = bodies.decide(given_out(), now=at(5))
    assert decision.next_in is not None
    assert decision.next_in <= silentowners.UNAPPLIED_SECONDS - 5
    assert decision.settled_until == podstates.to_seconds(at(silentowners.UNAPPLIED_SECONDS))


def test_once_the_pod_applies_ready_is_true_again() -> None:
    after = given_out()
    decision = bodies.decide(after, now=at(61))
    later = bodies.applying(bodies.applied(after, decision), "b")
    assert ready_at(later, 62)[:2] == ("True", "AllPartitionsOwned")


def test_a_pod_that_applied_an_earlier_generation_is_a_consumer_on_its_way() -> None:
    # Applied once: it runs `ehb consume` and can patch; a new generation not yet applied is
    # a hand-off under way, not a pod that reads nothing.
    after = bodies.applying(given_out(), "b")
    maps = []
    for cm in after.configmaps:
        cm = copy.deepcopy(dict(cm))
        cm["data"][configmaps.KEY_GENERATION] = str(int(cm["data"][configmaps.KEY_GENERATION]) + 1)
        maps.append(cm)
    after = dataclasses.replace(after, configmaps=tuple(maps))
    assert ready_at(after, 600)[:2] == ("True", "AllPartitionsOwned")


def test_a_hub_of_one_partition_is_counted_in_the_singular() -> None:
    one = silentowners.ready(
        silentowners.Silences(unapplied={"b": 1}), partitions=1, selector="app=c"
    )
    assert one is not None
    assert one.message.startswith("pod b holds 1 of 1 partition but has not applied")
    many = silentowners.ready(
        silentowners.Silences(unwritten={"b": 1, "c": 2}), partitions=4, selector="app=c"
    )
    assert many is not None
    assert many.message.startswith("pods b, c hold 3 of 4 partitions, but the operator")
