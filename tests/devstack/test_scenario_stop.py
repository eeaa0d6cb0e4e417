"""A scenario that is stopped stops all it runs, even when stopping one part fails."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from eventhub_balancer_devstack.scenarios import runs, systems


class _InterruptedWait:
    """The producer's future, whose wait a second Ctrl-C interrupts."""

    def result(self, timeout: float) -> None:
        raise KeyboardInterrupt

    def done(self) -> bool:
        return False


def test_an_interrupt_while_the_producer_stops_still_stops_the_pods_and_the_operator(
    tmp_path: Path,
) -> None:
    stopped: list[str] = []
    site = systems.Site(
        stack=cast(Any, None),
        loop=cast(Any, SimpleNamespace(call_soon=lambda callback: None)),
        namespace="demo-abc123",
        hub="orders",
        consumer="orders",
        container="checkpoints",
        record_dir=tmp_path,
        log_dir=tmp_path,
        blob_connection_string="",
        interval_seconds=5,
    )
    system = SimpleNamespace(stop=lambda: stopped.append("operator"))
    run = runs.ScenarioRun(site=site, system=cast(Any, system), options=runs.ScenarioOptions())
    run.producer = cast(Any, SimpleNamespace(stop=lambda: None))
    run._producer_done = _InterruptedWait()
    run.kubelet = cast(Any, SimpleNamespace(stop=lambda grace_s: stopped.append("pods")))
    with pytest.raises(KeyboardInterrupt):
        run.stop()
    assert stopped == ["pods", "operator"]
