"""The chaos run's watch faults and its epoch audit against a real local API (no stack):
``watchlag`` and ``relist`` reach the server's watches, and the audit reads what the server
committed, whatever its watches do."""

from __future__ import annotations

import json
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack import chaosfaults
from eventhub_balancer_devstack.commands import bench_chaos
from eventhub_balancer_devstack.kube import LocalKubeAPI
from eventhub_balancer_devstack.scenarios import systems


@pytest.fixture
def api() -> Iterator[LocalKubeAPI]:
    with LocalKubeAPI() as running:
        running.record_writes("v1/configmaps", systems.CR)
        yield running


def _chaos(api: LocalKubeAPI, **options: Any) -> chaosfaults.Chaos:
    """A Chaos whose scenario is only the API and a kubelet with no pods."""
    scenario: Any = types.SimpleNamespace(
        site=types.SimpleNamespace(stack=types.SimpleNamespace(kube=api)),
        kubelet=types.SimpleNamespace(names=list),
    )
    return chaosfaults.Chaos(
        scenario=scenario,
        system=None,  # type: ignore[arg-type]  # the watch faults do not touch the system
        proxy=None,  # type: ignore[arg-type]
        watch=None,  # type: ignore[arg-type]
        options=chaosfaults.ChaosOptions(**options),
    )


def _faults(api: LocalKubeAPI) -> list[tuple[str, str | None]]:
    return [(f.kind, f.plural) for f in api.handler.watch_faults]


def test_the_watch_kinds_are_fault_kinds_and_the_lag_comes_once() -> None:
    assert chaosfaults.parse_faults("relist,watchlag") == ("watchlag", "relist")
    assert "watchlag" in chaosfaults.ONCE
    assert "relist" not in chaosfaults.ONCE
    # Longer than the operator's 60 s wait for the echo of its own writes.
    assert chaosfaults.WATCHLAG_S > 60


def test_watchlag_delays_the_cr_and_configmap_watches_until_the_run_ends(
    api: LocalKubeAPI,
) -> None:
    run = _chaos(api, faults=("watchlag",))
    run.act("watchlag", deadline=time.monotonic() + 100.0)
    assert sorted(_faults(api)) == [("lag", "configmaps"), ("lag", "eventhubconsumers")]
    fault = api.handler.watch_faults[0]
    assert fault.lag_s == chaosfaults.WATCHLAG_S
    assert fault.ends - fault.starts <= 100.0
    assert run.faults["watchlag"] == 1
    assert run.choices() == []  # once per run
    api.clear_watch_faults()
    assert _faults(api) == []


def test_watchlag_is_skipped_when_the_run_has_no_time_left(api: LocalKubeAPI) -> None:
    run = _chaos(api, faults=("watchlag",))
    run.act("watchlag", deadline=time.monotonic())
    assert _faults(api) == []
    assert run.faults["watchlag"] == 0


def test_watchstall_silences_the_pod_watches_within_the_run(api: LocalKubeAPI) -> None:
    run = _chaos(api, faults=("watchstall",))
    run.act("watchstall", deadline=time.monotonic() + 30.0)
    assert _faults(api) == [("stall", "pods")]
    fault = api.handler.watch_faults[0]
    assert fault.ends - fault.starts <= 30.0
    assert "watchstall" in chaosfaults.ONCE
    assert chaosfaults.WATCHSTALL_S > 70  # beyond kopf's inactivity timeout
    run.act("watchstall", deadline=time.monotonic())  # no time left: skipped
    assert run.faults["watchstall"] == 1


def test_relist_ends_every_stream_and_expires_resumes(api: LocalKubeAPI) -> None:
    run = _chaos(api, faults=("relist",))
    run.act("relist", deadline=time.monotonic() + 100.0)
    assert sorted(_faults(api)) == [("close", None), ("gone", None)]
    close = next(f for f in api.handler.watch_faults if f.kind == "close")
    assert close.close_after_s == chaosfaults.RELIST_STREAM_S
    assert close.ends - close.starts == pytest.approx(chaosfaults.RELIST_S)
    assert run.choices() == ["relist"]  # it may come again


def _assign(api: LocalKubeAPI, pod: str, partitions: dict[str, int]) -> None:
    data = {
        configmaps.KEY_CONSUMER: "orders",
        configmaps.KEY_POD: pod,
        configmaps.KEY_GENERATION: "1",
        configmaps.KEY_PARTITIONS: json.dumps(
            {p: {"epoch": e, "state": "owned"} for p, e in partitions.items()}
        ),
    }
    api.create_object(
        "v1/configmaps", {"metadata": {"name": f"orders-{pod}"}, "data": data}, namespace="shop"
    )


def test_the_audit_counts_from_the_servers_write_record(api: LocalKubeAPI) -> None:
    run = _chaos(api)
    _assign(api, "c", {"0": 3, "1": 1})
    run.audit()
    # A lagging watch does not hide a write from the audit.
    api.inject_watch_fault("stall", seconds=60.0)
    _assign(api, "d", {"0": 3, "2": 1})
    run.audit()
    assert run.ledger.epoch_reuse == 1
    assert run.ledger.writes == 2
    assert run.unaudited == 0


def test_the_gap_between_faults_is_a_range_of_seconds() -> None:
    assert bench_chaos.parse_gap("62,68") == (62.0, 68.0)
    assert bench_chaos.parse_gap("2,2") == (2.0, 2.0)
    for wrong in ("5", "3,1", "0,1", "a,b"):
        with pytest.raises(errors.InvalidInput, match="--gap"):
            bench_chaos.parse_gap(wrong)
