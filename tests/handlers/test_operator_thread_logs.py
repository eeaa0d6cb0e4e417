"""An operator run in a thread (the demo, the benchmarks) logs no warning of kopf's that it
cannot take OS signals there: its stop flag stops it. ``ehb demo``'s log showed one in every
run, ``WARNING kopf._core.reactor.running: OS signals are ignored: running not in the main
thread.``, which asked nothing of the reader."""

from __future__ import annotations

import logging

import pytest

from eventhub_balancer.handlers import registering, running
from tests.support import fakes


def test_kopfs_warning_of_thread_signals_is_left_out_and_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hubs = fakes.FakeHubs(store=fakes.FakeCheckpointStore())
    runtime = registering.Operator(kube=fakes.FakeKube(), hubs=hubs)
    running.OperatorThread(runtime, running.Options(metrics_port=None))
    running.OperatorThread(runtime, running.Options(metrics_port=None))  # added once
    kopf_logger = logging.getLogger(running.KOPF_REACTOR_LOGGER)
    assert kopf_logger.filters.count(running._not_thread_signals) == 1
    caplog.set_level(logging.INFO)
    kopf_logger.warning(running.THREAD_SIGNALS)
    kopf_logger.info("Stop-flag is set to True. Operator is stopping.")
    assert [r.getMessage() for r in caplog.records] == [
        "Stop-flag is set to True. Operator is stopping."
    ]
