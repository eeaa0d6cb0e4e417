"""What Argo CD and Flux make of an EventHubConsumer's status: the same truth as Ready says.

The statuses are the operator's own: each is what the pure cycle (`reconciling.deciding`)
writes for a consumer walked through its states with `tests.reconciling.bodies` (balanced, a
hand-off in flight, a consumer group that does not exist, an invalid spec, a pause draining
and done). Two readers judge each:

- the chart's Argo CD health check, charts/eventhub-balancer/argocd/health.lua, run by a real
  Lua interpreter (lupa's Lua 5.1, the language of Argo CD's gopher-lua, and Lua 5.4);
- kstatus (sigs.k8s.io/cli-utils, what Flux's health checks call), as the `kstatus` command
  that `make install` builds from devstack/tools/kstatus prints it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lupa import lua51, lua54

from eventhub_balancer import errors
from eventhub_balancer.reconciling import observations
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod
from tests.support import loading

HEALTH_LUA = loading.CHART_DIR / "argocd" / "health.lua"
KSTATUS = Path(sys.executable).parent / "kstatus"
#: kstatus answers in milliseconds; more is a hang.
KSTATUS_TIMEOUT_S = 30


def as_object(observation: observations.Observation) -> dict[str, Any]:
    """The EventHubConsumer as the API server serves it, with the status the cycles wrote."""
    body = copy.deepcopy(dict(observation.body))
    return {"apiVersion": "eventhub-balancer.dev/v1alpha1", "kind": "EventHubConsumer", **body}


def settled(*names: str) -> observations.Observation:
    """Cycles until nothing changes: every partition given out, written and read back."""
    observation = bodies.observe(pods=[pod(n) for n in names])
    for second in range(5):
        observation, decision = bodies.decide_fully(observation, now=at(second))
        observation = bodies.applied(observation, decision)
    return observation


def balanced() -> dict[str, Any]:
    return as_object(settled("a", "b"))


def handing_off() -> dict[str, Any]:
    """A third pod joined: partitions are being revoked from a and b for it."""
    observation = bodies.with_pods(settled("a", "b"), pod("c", since=10))
    _, decision = bodies.decide_fully(observation, now=at(20))
    return as_object(bodies.applied(observation, decision))


def consumer_group_missing() -> dict[str, Any]:
    """Event Hubs lists the partitions but has no such consumer group."""
    missing = errors.ConsumerGroupNotFound(
        "consumer group 'analytics' of Event Hub 'orders' does not exist"
    )
    observation = dataclasses.replace(
        settled("a", "b"),
        hub=observations.HubRead(ids=bodies.IDS, fault=observations.Fault.of(missing)),
    )
    _, decision = bodies.decide_fully(observation, now=at(20))
    return as_object(bodies.applied(observation, decision))


def invalid_spec() -> dict[str, Any]:
    spec = {**bodies.SPEC, "startPosition": "beginning"}
    observation = bodies.observe(pods=[pod("a")], spec=spec)
    decision = bodies.decide(observation, now=at(0))
    return as_object(bodies.applied(observation, decision))


def pause(*, released: bool) -> dict[str, Any]:
    """spec.paused set on a balanced consumer: draining, or once both pods released."""
    from tests.reconciling.test_pausing import PAUSED_SPEC, respec

    observation = respec(settled("a", "b"), PAUSED_SPEC)
    observation = bodies.applied(observation, bodies.decide(observation, now=at(10)))
    if released:
        for second, name in ((11, "a"), (12, "b")):
            observation = bodies.acknowledged(observation, name)
            observation = bodies.applied(observation, bodies.decide(observation, now=at(second)))
    return as_object(observation)


def pausing() -> dict[str, Any]:
    return pause(released=False)


def paused() -> dict[str, Any]:
    return pause(released=True)


def zero(*, waiting: int) -> dict[str, Any]:
    """Its autoscaler deleted every pod (KEDA minReplicaCount 0), each after its release;
    then the backlog read says ``waiting`` events wait on each partition."""
    observation = settled("a", "b")
    for pod_name in ("a", "b"):
        observation = bodies.acknowledged(observation, pod_name)
    observation = dataclasses.replace(observation, pods=())
    for second in (20, 21):
        _, decision = bodies.decide_fully(observation, now=at(second))
        observation = bodies.applied(observation, decision)
    observation = dataclasses.replace(
        bodies.read_blobs(observation, {p: (1, 99) for p in bodies.IDS}),
        last_sequences=bodies.ends(dict.fromkeys(bodies.IDS, 99 + waiting)),
    )
    observation = bodies.applied(observation, bodies.decide(observation, now=at(80)))
    return as_object(observation)


def scaled_to_zero() -> dict[str, Any]:
    return zero(waiting=0)


def zero_with_events_waiting() -> dict[str, Any]:
    return zero(waiting=10)


def not_observed_yet() -> dict[str, Any]:
    """The spec changed; the operator has not written a status for the new generation."""
    found = balanced()
    found["metadata"]["generation"] = 2
    return found


#: state -> (its status, Argo CD's health, kstatus's verdict)
STATES: dict[str, tuple[Callable[[], dict[str, Any]], str, str]] = {
    "balanced": (balanced, "Healthy", "Current"),
    "handing-off": (handing_off, "Progressing", "InProgress"),
    "consumer-group-missing": (consumer_group_missing, "Degraded", "Failed"),
    "invalid-spec": (invalid_spec, "Degraded", "Failed"),
    "pausing": (pausing, "Progressing", "InProgress"),
    "paused": (paused, "Suspended", "Current"),
    "scaled-to-zero": (scaled_to_zero, "Healthy", "Current"),
    "zero-with-events-waiting": (zero_with_events_waiting, "Progressing", "InProgress"),
    "not-observed-yet": (not_observed_yet, "Progressing", "InProgress"),
}


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def test_the_states_are_what_the_operator_writes_for_them() -> None:
    """The statuses the checks are run on say what their names say."""
    assert conditions(balanced())["Balanced"] == ("True", "Balanced")
    assert conditions(handing_off())["Balanced"] == ("False", "HandoffsInFlight")
    assert conditions(handing_off())["Ready"][0] == "True"
    missing = conditions(consumer_group_missing())
    assert missing["EventHubReachable"] == ("False", "ConsumerGroupNotFound")
    assert missing["Ready"] == ("False", "EventHubUnusable")
    assert conditions(invalid_spec())["Ready"] == ("False", "InvalidSpec")
    assert conditions(pausing())["Paused"] == ("False", "Pausing")
    assert conditions(paused())["Paused"] == ("True", "Paused")
    assert conditions(scaled_to_zero())["Ready"] == ("True", "ScaledToZero")
    assert conditions(zero_with_events_waiting())["Ready"] == ("False", "ScaledToZero")


def argo_health(obj: dict[str, Any], runtime_module: Any = lua51) -> dict[str, str]:
    """Run the health check as Argo CD does: ``obj`` a global, the script's return value."""
    runtime = runtime_module.LuaRuntime()
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(HEALTH_LUA.read_text())
    return {str(k): str(v) for k, v in result.items()}


@pytest.mark.parametrize("runtime_module", [lua51, lua54], ids=["lua5.1", "lua5.4"])
@pytest.mark.parametrize("state", list(STATES))
def test_argo_cd_reads_each_state(state: str, runtime_module: Any) -> None:
    make, health, _ = STATES[state]
    obj = make()
    found = argo_health(obj, runtime_module)
    assert found["status"] == health, found
    assert found["message"]


def test_argo_cd_says_why_it_is_degraded() -> None:
    found = argo_health(consumer_group_missing())
    assert found["message"].startswith("EventHubUnusable: ")
    assert "analytics" in found["message"]


def test_argo_cd_waits_for_the_first_status() -> None:
    obj = balanced()
    del obj["status"]
    assert argo_health(obj) == {
        "status": "Progressing",
        "message": "Waiting for the operator's first cycle",
    }


def test_argo_cd_reads_failing_partitions_as_degraded_and_lost_ones_as_a_hand_off() -> None:
    obj = balanced()
    for entry in obj["status"]["conditions"]:
        if entry["type"] == "PartitionsFailing":
            entry.update(status="True", reason="PartitionsParked", message="partition 2 parked")
    assert argo_health(obj)["status"] == "Degraded"
    # Flux gates on it: the consumer runs as its spec asks; its handler needs fixing.
    assert kstatus(obj)["status"] == "Current"
    for entry in obj["status"]["conditions"]:
        if entry["type"] == "PartitionsFailing":
            entry.update(reason="PartitionsLost")
    assert argo_health(obj)["status"] == "Healthy"


def kstatus(obj: dict[str, Any]) -> dict[str, str]:
    if not KSTATUS.exists():
        raise FileNotFoundError(f"{KSTATUS} is missing: run `make install` (it builds kstatus)")
    done = subprocess.run(
        [str(KSTATUS)],
        input=json.dumps(obj),
        capture_output=True,
        text=True,
        timeout=KSTATUS_TIMEOUT_S,
        check=True,
    )
    verdict: dict[str, str] = json.loads(done.stdout)
    return verdict


@pytest.mark.parametrize("state", list(STATES))
def test_flux_reads_each_state(state: str) -> None:
    make, _, verdict = STATES[state]
    found = kstatus(make())
    assert found["status"] == verdict, found


def test_flux_says_why_it_failed() -> None:
    found = kstatus(consumer_group_missing())
    assert "analytics" in found["message"]


def test_kstatus_reads_yaml_too_and_refuses_what_is_not_an_object() -> None:
    import yaml

    assert KSTATUS.exists()
    as_yaml = yaml.safe_dump(balanced())
    done = subprocess.run(
        [str(KSTATUS)], input=as_yaml, capture_output=True, text=True, timeout=30, check=True
    )
    assert json.loads(done.stdout)["status"] == "Current"
    refused = subprocess.run(
        [str(KSTATUS)], input="[]", capture_output=True, text=True, timeout=30, check=False
    )
    assert refused.returncode == 1
    assert "not a Kubernetes object" in refused.stderr


def lua_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```lua\n(.*?)```", markdown.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize(
    "page",
    [loading.ROOT / "docs" / "gitops.md", loading.CHART_DIR / "README.md"],
    ids=lambda p: str(p.relative_to(loading.ROOT)),
)
def test_the_docs_show_the_health_check_the_chart_ships(page: Path) -> None:
    assert lua_blocks(page) == [HEALTH_LUA.read_text()]
