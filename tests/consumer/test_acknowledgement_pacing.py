"""A pod's acknowledgement that the API server does not take: paced, logged at a bounded
rate, and still tried at once when it says something new. On fake time, on the in-memory
ConfigMap of `configmapfakes`, whose patches fail as a Role without ``patch``, API priority
and fairness throttling writes (429), or an API server that is away make them fail."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

import pytest

from eventhub_balancer import errors
from eventhub_balancer.consumer import acknowledgements
from eventhub_balancer.contracts import configmaps
from tests.support import consumerfakes
from tests.support.configmapfakes import FakeConfigMaps, operators, running

pytestmark = pytest.mark.looptime

APPLIED = configmaps.ANNOTATION_APPLIED_GENERATION


def refused() -> Exception:
    return errors.ConfigurationError("HTTP 403: the pod's ServiceAccount needs patch")


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(
            lambda: errors.ConfigurationError("HTTP 403: needs patch on configmaps"),
            id="refused",
        ),
        pytest.param(lambda: errors.TransientError("HTTP 429"), id="throttled"),
    ],
)
async def test_a_failing_acknowledgement_is_retried_with_backoff_and_logged_at_a_bounded_rate(
    fake_hub: consumerfakes.FakeHub,
    fake_store: consumerfakes.FakeStore,
    caplog: pytest.LogCaptureFixture,
    failure: Callable[[], Exception],
) -> None:
    """The watch works; only the patch fails (a Role without ``patch``, API priority and
    fairness throttling writes): each pod must not send a patch and log a warning every turn
    of its loop."""
    caplog.set_level(logging.INFO, logger=acknowledgements.__name__)
    maps = FakeConfigMaps()
    maps.failure = failure
    async with running(maps, fake_hub, fake_store):
        maps.write(operators(1, {"0": (1, "owned")}))
        await asyncio.sleep(600)
        patches = [t for t, _ in maps.patches]
        warnings = [
            r
            for r in caplog.records
            if r.levelno >= logging.WARNING and r.name == acknowledgements.__name__
        ]
        assert len(patches) <= 600 / acknowledgements.RETRY_MAX_S + 10
        assert len(warnings) <= 600 / acknowledgements.FAILURE_LOG_EVERY_S + 2
        # Then the API takes it: written within the longest pause.
        maps.failure = None
        start = consumerfakes.loop_time()
        await consumerfakes.eventually(
            lambda: maps.annotations().get(APPLIED) == "1", within=30, what="written"
        )
        assert consumerfakes.loop_time() - start <= acknowledgements.RETRY_MAX_S + 1


async def test_a_release_is_tried_at_once_while_writes_fail(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    """The pause is for the same acknowledgement: a release is news the operator waits for."""
    maps = FakeConfigMaps()
    maps.failure = refused
    async with running(maps, fake_hub, fake_store) as consumer:
        maps.write(operators(1, {"0": (1, "owned")}))
        await asyncio.sleep(60)  # paced at the longest pause by now
        maps.write(operators(2, {"0": (1, "revoking")}))
        await consumerfakes.eventually(lambda: consumer.released == {"0": 1}, what="released")
        released_at = consumerfakes.loop_time()
        await consumerfakes.eventually(
            lambda: any(configmaps.parse_released(a) == {"0": 1} for _, a in maps.patches),
            within=acknowledgements.RETRY_MAX_S,
            what="the release tried",
        )
        tried = next(t for t, a in maps.patches if configmaps.parse_released(a) == {"0": 1})
        assert tried - released_at <= 1.0


async def test_sigterm_while_writes_fail_still_tries_the_last_release(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    maps = FakeConfigMaps()
    maps.failure = refused
    async with running(maps, fake_hub, fake_store) as consumer:
        maps.write(operators(1, {"0": (1, "owned")}))
        await asyncio.sleep(60)
        consumer.request_shutdown()
    assert configmaps.parse_released(maps.patches[-1][1]) == {"0": 1}


async def test_an_acknowledgement_says_the_partitions_released_since_the_last_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The annotation keeps every release, and each later acknowledgement said them again:
    ``acknowledged generation 5, released 16-31 (epochs 6-8,10,13)`` a minute after the pod
    released them, as if it had released them then."""

    class Source:
        async def acknowledge(self, **_: object) -> bool:
            return True

        def acknowledgement_lost(self) -> bool:
            return False

    caplog.set_level(logging.INFO, logger=acknowledgements.__name__)
    acks = acknowledgements.Acknowledgements(cast(Any, Source()), min_interval=5.0)
    await acks.write(applied_generation=3, released={}, reports={})
    await acks.write(applied_generation=4, released={"16": 6, "17": 6}, reports={})
    await acks.write(applied_generation=5, released={"16": 6, "17": 6}, reports={})
    await acks.write(applied_generation=6, released={"16": 6, "17": 6, "3": 2}, reports={})
    await acks.write(applied_generation=7, released={"16": 8, "17": 6, "3": 2}, reports={})
    assert [r.getMessage() for r in caplog.records if r.name == acknowledgements.__name__] == [
        "acknowledged generation 3, released nothing",
        "acknowledged generation 4, released 16-17 (epoch 6)",
        "acknowledged generation 5",
        "acknowledged generation 6, released 3 (epoch 2)",
        "acknowledged generation 7, released 16 (epoch 8)",
    ]
