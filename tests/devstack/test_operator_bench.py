"""`ehb bench operator`'s flags, and the other workloads' pods it creates (its run:
`tests/devstack/wire/test_json_outputs.py`)."""

from __future__ import annotations

import argparse
import json

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import labelselectors
from eventhub_balancer_devstack.benchmarks import clusterviews, otherworkloads
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
