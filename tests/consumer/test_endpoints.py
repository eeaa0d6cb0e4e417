"""/healthz, /readyz and /metrics over real HTTP on 127.0.0.1.

The runtime behind them runs on the in-memory fakes, on fake loop time: looptime polls the
sockets before it moves the clock to the next timer, so the HTTP exchanges are real and the
runtime's ticks cost no real time.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from eventhub_balancer.consumer import assignments, endpoints, runtime
from tests.consumer.test_runtime import FAST
from tests.support import consumerfakes


@pytest.mark.looptime
async def test_endpoints_follow_the_runtime(
    fake_hub: consumerfakes.FakeHub, fake_store: consumerfakes.FakeStore
) -> None:
    fake_hub.append("0", 20)
    fake_hub.append("1", 3)
    source = assignments.MemorySource()
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer="orders", pod="pod-a", batch=FAST, shutdown_timeout=2
        ),
        source=source,
        backends=consumerfakes.fake_backends(fake_hub, fake_store.handle("pod-a")),
        processor=consumerfakes.Recorder(),
    )
    server = await endpoints.serve(consumer, host="127.0.0.1", port=0)
    base = f"http://127.0.0.1:{endpoints.bound_port(server)}"
    task = asyncio.create_task(consumer.run())
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/healthz") as answer:
                assert answer.status == 200
            async with http.get(base + "/readyz") as answer:
                assert answer.status == 503
                assert "no assignment" in await answer.text()
            source.put(consumerfakes.configmap(7, {"0": (1, "owned"), "1": (2, "owned")}))
            async with asyncio.timeout(5):
                await source.wait_for(generation=7)
            async with http.get(base + "/readyz") as answer:
                assert answer.status == 200
                assert "generation 7" in await answer.text()
            await consumerfakes.eventually(
                lambda: consumer.stats["0"].events == 20 and consumer.stats["1"].events == 3,
                what="every event processed",
            )
            async with http.get(base + "/metrics") as answer:
                text = await answer.text()
            assert 'ehb_consumer_events_total{partition="0"} 20.0' in text
            assert 'ehb_consumer_events_total{partition="1"} 3.0' in text
            assert 'ehb_consumer_batches_total{partition="0"} 2.0' in text
            assert 'ehb_consumer_lag_events{partition="0"} 0.0' in text
            assert "ehb_consumer_owned_partitions 2.0" in text
            assert 'ehb_consumer_checkpoint_age_seconds{partition="1"}' in text
            consumer.request_shutdown()
            async with asyncio.timeout(5):
                await task
            async with http.get(base + "/readyz") as answer:
                assert answer.status == 503
            async with http.get(base + "/healthz") as answer:
                assert answer.status == 503
    finally:
        consumer.request_shutdown()
        await asyncio.gather(task, return_exceptions=True)
        await server.cleanup()


def test_metrics_show_failing_parked_and_dead_lettered_partitions() -> None:
    from prometheus_client import generate_latest

    from eventhub_balancer.consumer import metrics

    stats = {
        "0": metrics.PartitionStats(owned=True, parked=True, dead_lettered_events=0),
        "1": metrics.PartitionStats(owned=True, failing=True, dead_lettered_events=7),
    }
    text = generate_latest(metrics.registry_for(lambda: stats)).decode()
    assert 'ehb_consumer_partition_parked{partition="0"} 1.0' in text
    assert 'ehb_consumer_partition_parked{partition="1"} 0.0' in text
    assert 'ehb_consumer_partition_failing{partition="1"} 1.0' in text
    assert 'ehb_consumer_dead_lettered_events_total{partition="1"} 7.0' in text


def test_metrics_say_which_release_and_python_the_pod_runs() -> None:
    import platform

    from prometheus_client import generate_latest

    import eventhub_balancer
    from eventhub_balancer.consumer import metrics

    text = generate_latest(metrics.registry_for(dict)).decode()
    assert (
        f'ehb_consumer_build_info{{python="{platform.python_version()}",'
        f'version="{eventhub_balancer.__version__}"}} 1.0'
    ) in text.splitlines()
