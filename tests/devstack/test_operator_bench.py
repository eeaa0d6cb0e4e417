"""`ehb bench operator`'s flags, and the other workloads' pods it creates (its run:
`tests/devstack/wire/test_json_outputs.py`)."""

from __future__ import annotations

import argparse
import json
import types
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import labelselectors
from eventhub_balancer_devstack.benchmarks import clusterviews, operating, otherworkloads
from eventhub_balancer_devstack.commands import bench_operator


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_operator.add_arguments(parser)
    return parser.parse_args(argv)


def test_by_default_no_other_pods_and_every_pod_watched() -> None:
    settings = bench_operator.settings_of(parse())
    assert (settings.other_pods, settings.pod_selector) == (0, None)


def test_the_other_pods_and_the_selector_are_read() -> None:
    argv = ("--other-pods", "5000", "--pod-selector", clusterviews.CONSUMER_PODS)
    settings = bench_operator.settings_of(parse(*argv))
    assert settings.other_pods == 5000
    assert settings.pod_selector == "app.kubernetes.io/part-of=eventhub-balancer"


def test_an_empty_selector_watches_every_pod_as_the_operators_does() -> None:
    assert bench_operator.settings_of(parse("--pod-selector", "")).pod_selector is None


@pytest.mark.parametrize(
    ("argv", "flag", "says"),
    [
        (("--other-pods", "-1"), "--other-pods", "at least 0"),
        # The CRD's bound: past it, the consumer's creation was refused with a traceback.
        (("--interval", "70000"), "--interval", "from 1 to 3600 seconds"),
        (("--pod-selector", "app in (a"), "--pod-selector", "unbalanced"),
        # Valid, but the consumer pods would be no members: the run would never balance.
        (("--pod-selector", "app=other-1"), "--pod-selector", clusterviews.CONSUMER_PODS),
        (
            ("--consumers", "2", "--pod-selector", "app=consumer-0"),
            "--pod-selector",
            "app=consumer-1",
        ),
    ],
)
def test_a_wrong_flag_is_named_with_what_to_change(
    argv: tuple[str, ...], flag: str, says: str
) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        bench_operator.settings_of(parse(*argv))
    assert caught.value.field == flag
    assert says in caught.value.problem


def test_a_selector_of_the_consumer_pods_leaves_every_other_pod_out() -> None:
    selector = labelselectors.parse_query(clusterviews.CONSUMER_PODS, field="--pod-selector")
    others = [otherworkloads.body(i)["metadata"]["labels"] for i in range(200)]
    assert not any(selector.matches(labels) for labels in others)
    assert selector.matches(clusterviews.consumer_pod_labels("consumer-7"))


def test_no_consumer_selects_the_other_pods() -> None:
    """A bench consumer selects ``app=<its app>``; the other pods' apps are their own."""
    consumer = clusterviews.consumer_body("orders", hub="orders", app="consumer-0", interval=2)
    selector = labelselectors.parse_selector(consumer["spec"]["selector"], field="spec.selector")
    assert not any(
        selector.matches(otherworkloads.body(i)["metadata"]["labels"]) for i in range(200)
    )


def test_an_other_pod_is_mostly_spec_as_a_real_pod_is() -> None:
    body = otherworkloads.body(7)
    spec = body["spec"]
    assert len(spec["containers"]) == 3
    assert all(len(c["env"]) == 20 for c in spec["containers"])
    assert all(len(c["volumeMounts"]) == 4 for c in spec["containers"])
    assert len(spec["volumes"]) == 4
    names = [p["name"] for c in spec["containers"] for p in c["ports"]]
    assert len(names) == len(set(names)), "port names are unique within a pod"
    assert "ownerReferences" not in body["metadata"]
    # Several kilobytes before the API server adds its own fields (managedFields, defaults).
    assert len(json.dumps(body)) > 6_000
    assert len({otherworkloads.name(i) for i in range(1000)}) == 1000


class ScriptedOperator:
    """The operator process as `operating._forced_relist` asks it: its LIST counters and the
    re-lists its watches saw, moving on each time the (fake) clock passes a step's time."""

    def __init__(
        self,
        clock: list[float],
        steps: list[tuple[float, int, int, int]],
        *,
        cycle_seconds: float = 1.0,
    ) -> None:
        self.clock = clock
        self.steps = steps  # (from this time on, lists, relistings, re-lists of each kind)
        self.cycle_seconds = cycle_seconds  # the one consumer's cycles

    def stats(self) -> dict[str, Any]:
        lists, relistings, relists = 0, 0, 0
        for at, step_lists, step_relistings, step_relists in self.steps:
            if self.clock[0] >= at:
                lists, relistings, relists = step_lists, step_relistings, step_relists
        kinds = {kind: relists for kind in operating.RELISTED_KINDS}
        cycles = int(self.clock[0] // self.cycle_seconds)
        return {"lists": lists, "relistings": relistings, "relists": kinds, "cycles": cycles}


class RelistingServer:
    def ask(self, command: str, timeout: float | None = None) -> dict[str, Any]:
        assert command == "relist"
        return {"relist": ["*"]}


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep)
    monkeypatch.setattr(operating, "time", fake_time)
    return clock


def forced_relist(
    steps: list[tuple[float, int, int, int]], clock: list[float], *, cycle_seconds: float = 1.0
) -> int:
    settings = bench_operator.settings_of(parse())
    operator = ScriptedOperator(clock, steps, cycle_seconds=cycle_seconds)
    return operating._forced_relist(RelistingServer(), operator, settings)  # type: ignore[arg-type]


def test_the_relist_count_leaves_out_the_periodic_relisting(fake_clock: list[float]) -> None:
    # A kube-apiserver restart: the consumer re-reads its pods and ConfigMaps (2 LISTs), and
    # the 10-second relisting of pods fires twice meanwhile, once failing against the
    # stopped server: those two are the relisting's cost, not the re-list's.
    steps = [(0.0, 10, 3, 0), (1.0, 11, 4, 1), (2.0, 13, 4, 1), (3.0, 14, 5, 1)]
    assert forced_relist(steps, fake_clock) == 2


def test_the_relist_count_waits_for_both_watches_to_list_again(fake_clock: list[float]) -> None:
    # kopf lists thousands of pods for longer than the quiet: the ConfigMaps' re-list, and the
    # consumer's LIST after it, come 8 s after the first. Both are counted.
    steps = [(0.0, 0, 0, 0), (1.0, 1, 0, 0), (9.0, 1, 0, 1), (9.5, 2, 0, 1)]
    assert forced_relist(steps, fake_clock) == 2
    assert fake_clock[0] >= 9.5 + operating.RELIST_QUIET_SECONDS


def test_the_relist_count_waits_for_the_cycles_after_the_relists(fake_clock: list[float]) -> None:
    # kopf hands over a listing of thousands of pods for longer than the quiet: the consumer's
    # cycles stall meanwhile (one ends every 6 s here), and its second read comes 10 s after
    # the first. Counted once it has cycled twice since both kinds listed again.
    steps = [(0.0, 0, 0, 0), (1.0, 1, 0, 1), (11.0, 2, 0, 1)]
    assert forced_relist(steps, fake_clock, cycle_seconds=6.0) == 2


def test_the_relist_count_waits_for_the_lists_to_stop(fake_clock: list[float]) -> None:
    # LISTs that come 4 s apart are one re-list still going on: counted to the end.
    steps = [(0.0, 0, 0, 0), (1.0, 1, 0, 1), (5.0, 2, 0, 1), (9.0, 3, 0, 1)]
    assert forced_relist(steps, fake_clock) == 3
    assert fake_clock[0] >= 9.0 + operating.RELIST_QUIET_SECONDS
