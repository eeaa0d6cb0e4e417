"""A pod whose release may outlast the operator's wait for it says so, once, with what to change.

The operator gives a revoked partition to its next owner after ``handoffTimeoutSeconds``,
released or not; the pod's release takes up to ``--release-timeout`` plus
``--handler-exit-seconds``. Before, nothing compared the two outside the consumer chart: a
timeout lowered on the EventHubConsumer (or flags raised on a workload of one's own) let a
batch in flight at a revocation run on two pods at once, and nothing said why.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from eventhub_balancer.consumer import batchsettings, releasebudgets
from eventhub_balancer.contracts import configmaps
from tests.consumer.test_runtime import running
from tests.support import consumerfakes

DEFAULTS = batchsettings.BatchSettings()  # 20 s + 5 s


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == releasebudgets.__name__ and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize(("handoff", "fits"), [(None, True), (30, True), (26, True), (25, False)])
def test_the_default_release_fits_the_default_wait_and_no_less_than_it(
    handoff: int | None, fits: bool
) -> None:
    assert (releasebudgets.overrun(DEFAULTS, handoff) == "") == fits


def test_an_overrun_names_both_sides_and_what_to_change() -> None:
    said = releasebudgets.overrun(DEFAULTS, 10)
    assert said.startswith("a release may take 25 s (--release-timeout 20 + ")
    assert "--handler-exit-seconds 5), and the operator waits 10 s (handoffTimeoutSeconds)" in said
    assert "raise spec.balancing.handoffTimeoutSeconds above 25" in said
    quick = batchsettings.BatchSettings(release_timeout=2.5, handler_exit_timeout=1.0)
    assert releasebudgets.overrun(quick, 10) == ""
    assert "a release may take 3.5 s" in releasebudgets.overrun(quick, 0)


def test_the_budget_is_said_once_per_timeout_read(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    budget = releasebudgets.ReleaseBudget(DEFAULTS)
    for handoff in (None, 10, 10, 10):
        budget.read(handoff)
    assert len(warnings(caplog)) == 1
    budget.read(60)  # raised: fits, nothing said
    assert len(warnings(caplog)) == 1
    budget.read(10)  # lowered again: said again
    assert len(warnings(caplog)) == 2


@pytest.mark.looptime
async def test_a_pod_given_a_short_handoff_timeout_says_its_release_outlasts_it(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    short = {configmaps.KEY_HANDOFF_TIMEOUT_SECONDS: "1"}
    async with running(fake_hub, fake_store, consumerfakes.Recorder()) as (_, source):
        source.put(consumerfakes.configmap(1, {"0": (1, "owned")}))
        async with asyncio.timeout(1):
            await source.wait_for(generation=1)
        assert warnings(caplog) == []  # a release of 25 s fits the default 30 s
        for generation in (2, 3):
            source.put(consumerfakes.configmap(generation, {"0": (1, "owned")}, **short))
            async with asyncio.timeout(1):
                await source.wait_for(generation=generation)
        (said,) = warnings(caplog)
        assert "the operator waits 1 s (handoffTimeoutSeconds)" in said
