"""The consumer pod's /metrics: how many series a pod exports as partitions come and go."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from eventhub_balancer.consumer import metrics

COUNTERS = ("events", "batches", "handler_errors", "checkpoints", "dead_lettered_events")


def scrape(collector: metrics.RuntimeCollector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def partitions_with_counters(text: str) -> set[str]:
    return {
        line.split('partition="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("ehb_consumer_events_total{")
    }


def test_a_pod_drops_the_counters_of_partitions_it_let_go_long_ago() -> None:
    """1,024 partitions over pods that rebalance for weeks: a long-lived pod came to export
    five counters for every partition it ever held (up to 5,120 series a pod, where it holds
    a few dozen). Those it let go over 10 minutes ago go; one that comes back counts on."""
    clock = [1000.0]
    stats = {
        str(p): metrics.PartitionStats(events=10 * p, batches=p, owned=p < 2) for p in range(1024)
    }
    collector = metrics.RuntimeCollector(lambda: stats, now=lambda: clock[0])

    # The scrape after the rebalance still has the counters of what was let go just now: its
    # last events are counted.
    assert len(partitions_with_counters(scrape(collector))) == 1024
    clock[0] += metrics.RELEASED_SERIES_SECONDS - 1
    assert len(partitions_with_counters(scrape(collector))) == 1024

    clock[0] += 2
    text = scrape(collector)
    assert partitions_with_counters(text) == {"0", "1"}
    for counter in COUNTERS:
        assert f'ehb_consumer_{counter}_total{{partition="5"}}' not in text
    assert "ehb_consumer_owned_partitions 2.0" in text

    # Partition 5 comes back: its counters go on from where they were, as counters must.
    stats["5"].owned = True
    stats["5"].events += 1
    text = scrape(collector)
    assert 'ehb_consumer_events_total{partition="5"} 51.0' in text
    assert partitions_with_counters(text) == {"0", "1", "5"}
