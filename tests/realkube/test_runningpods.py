"""What the local node writes of a pod it runs, through a crash and a restart, as a kubelet
writes it: the Ready condition keeps its lastTransitionTime while its status stays (the
operator counts a NotReady pod's grace from it), and ``lastState.terminated`` says how the
container last ended.

The node wrote every status with the time of the write as each condition's
lastTransitionTime, and no ``lastState``: a crash-looping pod's NotReady began again at each
restart, and the operator could not tell a restart from a first start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from eventhub_balancer_devstack import podprocesses
from eventhub_balancer_devstack.realkube import nodeleases, runningpods


class Process:
    """A pod's process: running until ``code`` is set."""

    def __init__(self) -> None:
        self.code: int | None = None
        self.pid = 4242

    def poll(self) -> int | None:
        return self.code


class Calls:
    """Keeps the statuses written."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []

    def patch(self, resource: str, name: str, patch: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.statuses.append(patch["status"])
        return {}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The node's wall clock, set by the test."""
    now = ["2026-12-06T08:00:00Z"]
    monkeypatch.setattr(nodeleases, "now", lambda: now[0])
    monkeypatch.setattr(runningpods, "RESTART_BACKOFF_S", (0.0,))
    return now


def running(
    template: podprocesses.PodTemplate, process: Process, *, spec: dict[str, Any] | None = None
) -> runningpods.RunningPod:
    """Pod orders-0 of the node, running ``process`` from ``template``."""
    return runningpods.RunningPod(
        namespace="shop",
        name="orders-0",
        uid="u-1",
        container="consumer",
        image="consumer:1",
        port=8080,
        template=template,
        process=cast(Any, process),
        started_at=nodeleases.now(),
        spec=spec or {},
    )


def ready_condition(status: dict[str, Any]) -> tuple[str, str]:
    (ready,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    return ready["status"], ready["lastTransitionTime"]


def test_a_crash_and_its_restart_keep_the_ready_transition_and_say_how_it_ended(
    clock: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = [True]
    processes = [Process()]
    monkeypatch.setattr(runningpods, "_probe", lambda pod: pod.process.poll() is None and probes[0])

    def spawn(*args: Any, **kwargs: Any) -> Process:
        processes.append(Process())
        return processes[-1]

    monkeypatch.setattr(podprocesses, "spawn", spawn)
    pod = running(cast(podprocesses.PodTemplate, None), processes[0])
    calls = Calls()
    checks = cast(Any, calls)

    clock[0] = "2026-12-06T08:00:05Z"
    runningpods.check(checks, pod)  # Ready
    assert ready_condition(calls.statuses[-1]) == ("True", "2026-12-06T08:00:05Z")
    assert calls.statuses[-1]["containerStatuses"][0]["lastState"] == {}

    clock[0] = "2026-12-06T08:01:00Z"
    processes[0].code = -9  # SIGKILL, as an OOM kill
    runningpods.check(checks, pod)  # NotReady, and restarted at once (no back-off here)
    crashed, restarted = calls.statuses[-2:]
    assert ready_condition(crashed) == ("False", "2026-12-06T08:01:00Z")
    terminated = {
        "exitCode": 137,
        "reason": "Error",
        "startedAt": "2026-12-06T08:00:00Z",
        "finishedAt": "2026-12-06T08:01:00Z",
    }
    assert crashed["containerStatuses"][0]["lastState"] == {"terminated": terminated}
    (container,) = restarted["containerStatuses"]
    assert container["restartCount"] == 1
    assert "running" in container["state"]
    assert container["lastState"] == {"terminated": terminated}

    # Still NotReady later (its probe fails while it starts): its transition stays.
    probes[0] = False
    clock[0] = "2026-12-06T08:01:30Z"
    processes[1].code = 1
    runningpods.check(checks, pod)
    (container,) = calls.statuses[-1]["containerStatuses"]
    assert ready_condition(calls.statuses[-1]) == ("False", "2026-12-06T08:01:00Z")
    assert container["restartCount"] == 2
    assert container["lastState"]["terminated"]["exitCode"] == 1
    assert container["lastState"]["terminated"]["startedAt"] == "2026-12-06T08:01:00Z"

    probes[0] = True
    clock[0] = "2026-12-06T08:02:00Z"
    runningpods.check(checks, pod)
    assert ready_condition(calls.statuses[-1]) == ("True", "2026-12-06T08:02:00Z")


def test_a_failed_container_under_fallback_to_logs_leaves_its_logs_tail_as_its_message(
    clock: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The consumer chart asks for ``terminationMessagePolicy: FallbackToLogsOnError``: a
    kubelet keeps the last lines of a failed container's log in ``lastState.terminated``, and
    the operator says the last one beside a crash loop. The node kept no message."""
    monkeypatch.setattr(runningpods, "_probe", lambda pod: pod.process.poll() is None)
    monkeypatch.setattr(podprocesses, "spawn", lambda *args, **kwargs: Process())
    template = podprocesses.PodTemplate(
        name_prefix="orders", labels={}, command=lambda name, port: [], log_dir=tmp_path
    )
    noise = "".join(f'{{"level": "INFO", "message": "line {n}"}}\n' for n in range(200))
    said = "ehb: error: --handler: module 'orders.pipeline' has no attribute 'nope'"
    (tmp_path / "orders-0.log").write_text(noise + said + "\n")

    def ended(policy: str | None, code: int) -> dict[str, Any]:
        container = {"name": "consumer"} | ({"terminationMessagePolicy": policy} if policy else {})
        pod = running(template, Process(), spec={"containers": [container]})
        calls = Calls()
        runningpods.check(cast(Any, calls), pod)
        pod.process.code = code
        runningpods.check(cast(Any, calls), pod)
        terminated: dict[str, Any] = calls.statuses[-1]["containerStatuses"][0]["lastState"][
            "terminated"
        ]
        return terminated

    message = ended("FallbackToLogsOnError", 2)["message"]
    assert message.endswith('line 199"}\n' + said)
    assert len(message.encode()) <= runningpods.FALLBACK_BYTES
    assert len(message.splitlines()) <= runningpods.FALLBACK_LINES
    assert "message" not in ended("FallbackToLogsOnError", 0)  # it did not fail
    assert "message" not in ended(None, 2)  # File, the default: no termination-log file here
