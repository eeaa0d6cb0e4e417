"""Ready and Balanced follow the data path: they are False while the pods cannot process
whatever the operator assigns (a consumer group or hub that does not exist, a Secret without
its key, every partition failing), and Balanced is never True over no partitions.

Pure: observations built from bodies, decided with a fixed ``now``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from eventhub_balancer.contracts import podstates, timestamps
from eventhub_balancer.reconciling import observations
from tests.install import test_gitops_health as gitops_states
from tests.reconciling import bodies, test_reports
from tests.reconciling.bodies import at, pod

GROUP_MISSING = observations.Fault(
    reason="ConsumerGroupNotFound",
    message=(
        "consumer group 'analytics' of Event Hub 'orders' in shop.servicebus.windows.net does "
        "not exist: create it, or fix spec.eventHub.consumerGroup"
    ),
)
KEY_MISSING = observations.Fault(
    reason="SecretNotFound",
    message=(
        "Secret shop/b has no key 'cs': create it with the connection string under that key, "
        "or fix the connectionStringSecretRef in the spec that names it"
    ),
)


def conditions_of(
    observation: observations.Observation, *, blobs: bool = True
) -> dict[str, tuple[str, str]]:
    """{type: (status, reason)} after one decision (with the blobs read when it asks for them,
    unless ``blobs`` is false: they cannot be read), written back."""
    if blobs:
        seen, decision = bodies.decide_fully(observation, now=at(5))
    else:
        seen, decision = observation, bodies.decide(observation, now=at(5))
    after = bodies.applied(seen, decision)
    return {c["type"]: (c["status"], c["reason"]) for c in after.status["conditions"]}


def test_a_missing_consumer_group_makes_ready_false_and_is_said_in_one_condition() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")])
    observation = dataclasses.replace(
        observation, hub=observations.HubRead(ids=bodies.IDS, fault=GROUP_MISSING)
    )
    seen, decision = bodies.decide_fully(observation, now=at(5))
    after = bodies.applied(seen, decision)
    found = {c["type"]: c for c in after.status["conditions"]}
    assert (found["EventHubReachable"]["status"], found["EventHubReachable"]["reason"]) == (
        "False",
        "ConsumerGroupNotFound",
    )
    assert found["EventHubReachable"]["message"].startswith(GROUP_MISSING.message)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "EventHubUnusable")
    assert found["Ready"]["message"].startswith(
        "the pods cannot use Event Hubs (ConsumerGroupNotFound, see EventHubReachable): "
        "consumer group 'analytics'"
    )
    reasons = [c["reason"] for c in after.status["conditions"]]
    assert reasons.count("ConsumerGroupNotFound") == 1
    # One Warning, named for what is wrong.
    assert [(e.reason, e.type) for e in decision.events if e.type == "Warning"] == [
        ("ConsumerGroupNotFound", "Warning")
    ]


def test_a_secret_without_its_key_is_neither_ready_nor_balanced_over_no_partitions() -> None:
    """A consumer whose hub was never listed: Ready said PartitionsUnknown, "could not be read
    yet: see EventHubReachable", and the PARTITIONS column 0, where the same fault on a
    consumer listed before said EventHubUnusable with the cause and what to change."""
    observation = bodies.observe(pods=[pod("a"), pod("b")], ids=None)
    observation = dataclasses.replace(
        observation, hub=observations.HubRead(ids=None, fault=KEY_MISSING)
    )
    seen, decision = bodies.decide_fully(observation, now=at(5))
    status = bodies.applied(seen, decision).status
    found = {c["type"]: c for c in status["conditions"]}
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "EventHubUnusable")
    assert found["Ready"]["message"].startswith(
        "the pods cannot use Event Hubs (SecretNotFound, see EventHubReachable): "
        "Secret shop/b has no key 'cs': create it"
    )
    assert (found["Balanced"]["status"], found["Balanced"]["reason"]) == (
        "False",
        "PartitionsUnknown",
    )
    assert found["EventHubReachable"]["reason"] == "SecretNotFound"
    # Not 0: no Event Hub has no partitions. Unknown is no number (an empty column).
    assert status.get("partitionCount") is None


def test_a_hub_that_may_answer_later_leaves_the_partitions_unknown() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")], ids=None)
    unreachable = observations.Fault(reason="EventHubUnreachable", message="no answer in 15 s")
    observation = dataclasses.replace(
        observation, hub=observations.HubRead(ids=None, fault=unreachable)
    )
    found = conditions_of(observation)
    assert found["Ready"] == ("False", "PartitionsUnknown")


def test_a_store_secret_without_its_key_makes_ready_false() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")])
    observation = dataclasses.replace(observation, store=observations.StoreRead(fault=KEY_MISSING))
    found = conditions_of(observation, blobs=False)
    assert found["CheckpointStoreReachable"] == ("False", "SecretNotFound")
    assert found["Ready"] == ("False", "CheckpointStoreUnusable")
    assert found["Balanced"] == ("True", "Balanced")  # the spread itself is right


def test_a_fault_that_may_pass_leaves_ready_to_the_pods() -> None:
    observation = bodies.observe(pods=[pod("a"), pod("b")])
    unreachable = observations.Fault(reason="EventHubUnreachable", message="no answer in 15 s")
    observation = dataclasses.replace(
        observation, hub=observations.HubRead(ids=bodies.IDS, fault=unreachable)
    )
    found = conditions_of(observation)
    assert found["EventHubReachable"] == ("False", "EventHubUnreachable")
    assert found["Ready"] == ("True", "AllPartitionsOwned")


def test_every_partition_failing_makes_ready_false_and_one_recovering_makes_it_true() -> None:
    observation = test_reports.started(pod("a"), pod("b"))
    error = "ValueError: cannot decode"
    failing: dict[str, dict[str, tuple[Any, ...]]] = {
        "a": {"0": ("failing", 1, 3, error), "1": ("parked", 1, 10, error)},
        "b": {"2": ("stuck", 1), "3": ("failing", 1, 2, error)},
    }
    for name, reported in failing.items():
        observation = test_reports.reported(observation, name, reported)
    observation, _ = test_reports.next_cycle(observation, now=5)
    ready = bodies.condition(observation, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AllPartitionsFailing")
    assert ready["message"].startswith("all 4 partitions are reported failing, parked or stuck")

    observation = test_reports.reported(observation, "b", {"2": ("stuck", 1)})
    observation, _ = test_reports.next_cycle(observation, now=10)
    assert bodies.condition(observation, "Ready")["status"] == "True"


def test_partitions_lost_are_not_counted_as_failing_everything() -> None:
    observation = test_reports.started(pod("a"))
    lost: dict[str, tuple[Any, ...]] = {p: ("lost", 1) for p in bodies.IDS}
    observation = test_reports.reported(observation, "a", lost)
    observation, _ = test_reports.next_cycle(observation, now=5)
    assert bodies.condition(observation, "Ready")["reason"] != "AllPartitionsFailing"


def test_no_pod_names_the_operators_pod_selector_when_it_has_one() -> None:
    """A consumer's pods that lack the label the operator watches (``--pod-selector``) are
    not found: the condition says where it looked, or the selector would look right."""

    def ready_message(pod_scope: str) -> str:
        observation = dataclasses.replace(bodies.observe(pods=[]), pod_scope=pod_scope)
        seen, decision = bodies.decide_fully(observation, now=at(5))
        after = bodies.applied(seen, decision)
        found = {c["type"]: c for c in after.status["conditions"]}
        assert found["Ready"]["reason"] == "NoPods"
        return str(found["Ready"]["message"])

    scoped = ready_message("app.kubernetes.io/part-of=eventhub-balancer")
    assert "among the pods the operator watches (app.kubernetes.io/part-of=eventhub-balancer)" in (
        scoped
    )
    assert "operator watches" not in ready_message("")


def crashing(name: str, reason: str = "CrashLoopBackOff", message: str = "") -> dict[str, Any]:
    """A pod whose container the kubelet waits to start again, as it lists it: a crash loop's
    message is its back-off, the others' what ``message`` says."""
    body = pod(name, ready=False)
    if reason == "CrashLoopBackOff":
        message = message or f"back-off 5m0s restarting failed container=consumer pod={name}"
    body["status"]["containerStatuses"] = [
        {
            "name": "consumer",
            "ready": False,
            "restartCount": 7,
            "state": {"waiting": {"reason": reason, "message": message}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }
    ]
    return body


def restarted(name: str, restarts: int, *, message: str = "") -> dict[str, Any]:
    """A pod Running and not Ready since 100 s ago, between the restarts of a crash loop: its
    container ended 3 s ago (with ``message`` as its termination message) and runs again."""
    body = pod(name, ready=False, since=-100)
    ended = {"exitCode": 1, "reason": "Error", "finishedAt": timestamps.format_time(at(-3))}
    body["status"]["containerStatuses"] = [
        {
            "name": "consumer",
            "ready": False,
            "restartCount": restarts,
            "state": {"running": {"startedAt": timestamps.format_time(at(-2))}},
            "lastState": {"terminated": ended | ({"message": message} if message else {})},
        }
    ]
    return body


def test_no_ready_pod_names_the_pods_and_what_their_containers_wait_on() -> None:
    """Every pod crash-looping read "2 pods match spec.selector but none is Running and Ready",
    the same words as pods that were merely starting: neither which pods nor why."""
    unscheduled = pod("d", ready=False)
    unscheduled["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    observation = bodies.observe(
        pods=[
            crashing("a"),
            crashing("b", "ImagePullBackOff"),
            pod("c", ready=False),
            unscheduled,
            crashing("e"),
        ]
    )
    seen, decision = bodies.decide_fully(observation, now=at(5))
    found = {c["type"]: c for c in bodies.applied(seen, decision).status["conditions"]}
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "NoReadyPods")
    assert found["Ready"]["message"] == (
        "5 pods match spec.selector but none is Running and Ready: a CrashLoopBackOff, "
        "b ImagePullBackOff, c not Ready and 2 more (kubectl describe pod and the pods' logs "
        "say why)"
    )


def test_what_keeps_a_pod_from_starting_is_said_as_the_kubelet_says_it() -> None:
    """A consumer's Secret deleted, its restarted pod waited in CreateContainerConfigError and
    Ready read "... b CreateContainerConfigError (kubectl describe pod and the pods' logs say
    why)": the kubelet's ``secret "orders-blob" not found`` was one describe away. Said once for
    the pods it stops; a crash loop's message (its back-off) is not said: its log says why."""
    missing = 'secret "orders-blob" not found'
    pods = [
        crashing("a", "CreateContainerConfigError", missing),
        crashing("b", "CreateContainerConfigError", missing),
        crashing("c"),
    ]
    seen, decision = bodies.decide_fully(bodies.observe(pods=pods), now=at(5))
    assert bodies.condition(bodies.applied(seen, decision), "Ready")["message"] == (
        "3 pods match spec.selector but none is Running and Ready: a CreateContainerConfigError "
        f"({missing}), b CreateContainerConfigError, c CrashLoopBackOff (kubectl describe pod "
        "and the pods' logs say why)"
    )
    # Nothing reports trouble because nothing runs: PartitionsFailing says so, not only
    # AllPartitionsProcessing (its reason, which alerts read).
    failing = bodies.condition(bodies.applied(seen, decision), "PartitionsFailing")
    assert (failing["status"], failing["reason"], failing["message"]) == (
        "False",
        "AllPartitionsProcessing",
        "no pod reports a failing, parked, stuck or lost partition; no pod is Ready to process "
        "(see Ready)",
    )
    # The scheduler's message on one line, and no message beyond its bound.
    unscheduled = pod("d", ready=False)
    room = "0/3 nodes are available:\n 3 Insufficient cpu."
    unscheduled["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": room}
        ],
    }
    image = "registry.example/orders:v2"
    told = (
        f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and '
        f'unpack image "{image}": failed to resolve reference "{image}": {image}: not found'
    )
    pulled = crashing("e", "ErrImagePull", told)
    assert podstates.pod_state(unscheduled).detail == "0/3 nodes are available: 3 Insufficient cpu."
    # A long message is cut between words and marked as cut, as every condition's message is.
    detail = podstates.pod_state(pulled).detail
    assert len(detail) <= podstates.DETAIL < len(told)
    assert detail.endswith(" …")
    assert told.startswith(detail.removesuffix(" …") + " ")
    # A pod kept with what it was read from is read again when only the message changes.
    moved = copy.deepcopy(unscheduled)
    moved["status"]["conditions"][0]["message"] = "0/4 nodes are available: 4 Insufficient cpu."
    assert podstates.state_inputs(moved) != podstates.state_inputs(unscheduled)


def test_a_crash_loop_says_the_last_line_its_container_left() -> None:
    """A consumer whose handler does not exist crash-looped, and Ready said ``a
    CrashLoopBackOff`` alone, or ``a restarted 6 times`` between its restarts: the reason was
    the last line of its log, which the kubelet keeps as the container's termination message
    (the consumer chart's ``terminationMessagePolicy: FallbackToLogsOnError``)."""
    said = "ehb: error: --handler: module 'orders.pipeline' has no attribute 'nope'"
    looping = crashing("a")
    ended = looping["status"]["containerStatuses"][0]["lastState"]["terminated"]
    ended["message"] = '{"level": "INFO", "message": "credentials: from files"}\n' + said + "\n"
    quit_line = {"level": "ERROR", "message": "no Spark Connect server at sc://spark:15002"}
    between = restarted("b", 6, message=json.dumps(quit_line))  # a JSON line: its message
    seen, decision = bodies.decide_fully(bodies.observe(pods=[looping, between]), now=at(5))
    assert bodies.condition(bodies.applied(seen, decision), "Ready")["message"] == (
        f"2 pods match spec.selector but none is Running and Ready: a CrashLoopBackOff ({said}), "
        "b restarted 6 times (no Spark Connect server at sc://spark:15002) (kubectl describe "
        "pod and the pods' logs say why)"
    )
    # No termination message: the reason alone, as before; nor when the log's tail says only
    # how it went (a SIGKILL's, say). A reason of its own is said instead of any line.
    ended["message"] = ""
    assert podstates.pod_state(looping).detail == ""
    routine = [
        "2026-12-06 20:10:22,140 INFO eventhub_balancer.consumer.partitions: partition 3: ...",
        '{"time": "2026-12-06T20:10:22.140+00:00", "level": "DEBUG", "message": "polled"}',
    ]
    ended["message"] = "\n".join(routine)
    assert podstates.pod_state(looping).detail == ""
    failed = '{"level": "ERROR", "message": "the Event Hub is gone"}'
    ended["message"] = "\n".join([failed, *routine])
    assert podstates.pod_state(looping).detail == "the Event Hub is gone"
    ended["reason"] = "OOMKilled"
    assert podstates.pod_state(looping).detail == "OOMKilled"
    ended["reason"] = "Error"
    # Lines nested past what the parser takes are said as they are; they never fail the cycle.
    ended["message"] = "[" * 5000
    assert podstates.pod_state(looping).detail.startswith("[[[")
    ended["message"] = "{" + '"a":' * 3000 + "1" + "}" * 3000
    assert podstates.pod_state(looping).detail.startswith('{"a":')


def test_one_pod_and_one_hand_off_read_in_the_singular() -> None:
    """`kubectl describe` showed "1 partitions are being handed off" when a third pod joined
    two, and "1 pods match spec.selector" for a lone pod that is not Ready."""
    one = bodies.observe(pods=[pod("a", ready=False)])
    seen, decision = bodies.decide_fully(one, now=at(5))
    found = {c["type"]: c for c in bodies.applied(seen, decision).status["conditions"]}
    assert found["Ready"]["message"].startswith("1 pod matches spec.selector but none is")

    joined = gitops_states.handing_off()["status"]
    balanced = {c["type"]: c for c in joined["conditions"]}["Balanced"]
    assert balanced["message"] == "1 partition is being handed off"


def test_a_hub_of_one_partition_on_one_pod_reads_in_the_singular() -> None:
    """A one-partition hub on one pod read "has 1 partitions", "all 1 partitions are owned"
    and "1 partitions over 1 Ready pods"."""
    observation = test_reports.started(pod("a"), ids=("0",))
    assert bodies.condition(observation, "EventHubReachable")["message"].endswith("has 1 partition")
    assert bodies.condition(observation, "Ready")["message"] == (
        "the only partition is owned by a Ready pod"
    )
    assert bodies.condition(observation, "Balanced")["message"] == ("1 partition over 1 Ready pod")
    error = "ValueError: cannot decode"
    observation = test_reports.reported(observation, "a", {"0": ("failing", 1, 1, error)})
    observation, _ = test_reports.next_cycle(observation, now=5)
    assert bodies.condition(observation, "Ready")["message"].startswith(
        "the only partition is reported failing, parked or stuck"
    )
    assert bodies.condition(observation, "PartitionsFailing")["message"] == (
        "1 partition in trouble (1 failing): 0 on a failing after 1 attempt: " + error
    )


def test_ready_pods_beyond_the_partition_count_are_said_to_stand_idle() -> None:
    """Six Spark pods on a hub of four partitions read "4 partitions over 6 Ready pods", and
    nothing said that two of them, each with its JVM, held nothing and never would."""
    ids = ("0", "1", "2", "3")
    six = test_reports.started(*(pod(name) for name in "abcdef"), ids=ids)
    assert bodies.condition(six, "Balanced")["message"] == (
        "4 partitions over 6 Ready pods; 2 Ready pods more than partitions, standing idle"
    )
    five = test_reports.started(*(pod(name) for name in "abcde"), ids=ids)
    assert bodies.condition(five, "Balanced")["message"].endswith(
        "; 1 Ready pod more than partitions, standing idle"
    )
    four = test_reports.started(*(pod(name) for name in "abcd"), ids=ids)
    assert bodies.condition(four, "Balanced")["message"] == "4 partitions over 4 Ready pods"


def test_a_pod_that_cannot_start_is_named_once_its_share_stops_waiting_for_it() -> None:
    """A rollout whose new pod stayed in CreateContainerConfigError (an env var from a Secret key
    that does not exist) read "Balanced: 32 partitions over 2 Ready pods": the pod was past
    podGraceSeconds, so its share stopped waiting for it, and nothing named it."""
    stuck = crashing("c", "CreateContainerConfigError")
    stuck["status"]["phase"] = "Pending"
    stuck["spec"] = {"nodeName": "node-1"}
    unscheduled = pod("d", ready=False)
    unscheduled["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    observation = test_reports.started(pod("a"), pod("b"))
    joined = dataclasses.replace(observation, pods=(*observation.pods, stuck))
    within, _ = test_reports.next_cycle(joined, now=5)
    assert bodies.condition(within, "Balanced")["reason"] == "PodsStarting"
    past, _ = test_reports.next_cycle(within, now=60)
    assert bodies.condition(past, "Balanced")["message"] == (
        "4 partitions over 2 Ready pods; 1 pod not Ready, holding nothing: "
        "c CreateContainerConfigError"
    )
    # One that no node took holds nothing from the start; either is named, the first by name.
    both = dataclasses.replace(past, pods=(*past.pods, unscheduled))
    both, _ = test_reports.next_cycle(both, now=65)
    assert bodies.condition(both, "Balanced")["message"].endswith(
        "; 2 pods not Ready, holding nothing: c CreateContainerConfigError, d Unschedulable"
    )
    # Ready, it takes its share; nothing is said of it.
    ready = dataclasses.replace(both, pods=(pod("a"), pod("b"), pod("c", since=70)))
    for now in (70, 71, 72):
        ready, _ = test_reports.next_cycle(ready, now=now)
    assert "not Ready" not in bodies.condition(ready, "Balanced")["message"]


def test_a_pod_between_the_restarts_of_a_crash_loop_says_how_often_it_restarted() -> None:
    """A Spark pod whose Connect server had gone started, waited 30 s for it, exited and
    started again: between its back-offs it was Running and not Ready, and Ready said "a not
    Ready" alone, as of a pod still starting for the first time."""
    looping = restarted("a", 11)
    once = copy.deepcopy(looping)
    once["metadata"]["name"] = once["metadata"]["uid"] = "b"
    once["status"]["containerStatuses"][0]["restartCount"] = 1
    # A restart long before it turned NotReady is not why it is NotReady now.
    long_ago = copy.deepcopy(looping)
    long_ago["metadata"]["name"] = long_ago["metadata"]["uid"] = "c"
    long_ago["status"]["conditions"][0]["lastTransitionTime"] = timestamps.format_time(at(-1))
    (terminated,) = [c["lastState"]["terminated"] for c in long_ago["status"]["containerStatuses"]]
    terminated["finishedAt"] = timestamps.format_time(at(-3600))
    observation = bodies.observe(pods=[looping, once, long_ago])
    seen, decision = bodies.decide_fully(observation, now=at(5))
    found = {c["type"]: c for c in bodies.applied(seen, decision).status["conditions"]}
    assert found["Ready"]["message"] == (
        "3 pods match spec.selector but none is Running and Ready: a restarted 11 times, "
        "b restarted 1 time, c not Ready (kubectl describe pod and the pods' logs say why)"
    )
