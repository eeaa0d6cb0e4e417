"""Label selectors are checked as the API server checks them, so that a selector the CRD lets
through never makes every list call of every cycle fail without a word."""

from __future__ import annotations

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import labelselectors


def parse(body: object) -> labelselectors.Selector:
    return labelselectors.parse_selector(body, field="spec.selector")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"matchLabels": {"app": "has space"}}, "spec.selector.matchLabels[app]"),
        ({"matchLabels": {"app": "x" * 64}}, "spec.selector.matchLabels[app]"),
        ({"matchLabels": {"app": "-leading"}}, "spec.selector.matchLabels[app]"),
        ({"matchLabels": {"bad key": "x"}}, "spec.selector.matchLabels"),
        ({"matchLabels": {"Example.com/app": "x"}}, "spec.selector.matchLabels"),
        ({"matchLabels": {"/app": "x"}}, "spec.selector.matchLabels"),
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a b"]}]},
            "spec.selector.matchExpressions[0].values[0]",
        ),
        (
            {"matchExpressions": [{"key": "a/b/c", "operator": "Exists"}]},
            "spec.selector.matchExpressions[0].key",
        ),
    ],
)
def test_what_the_api_server_rejects_is_refused_naming_the_field(body: object, field: str) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        parse(body)
    assert caught.value.field == field


def test_what_the_api_server_accepts_is_accepted() -> None:
    selector = parse(
        {
            "matchLabels": {"app.kubernetes.io/name": "orders", "tier": "", "v": "1.2_3-a"},
            "matchExpressions": [{"key": "example.com/team", "operator": "In", "values": ["a"]}],
        }
    )
    assert selector.matches(
        {"app.kubernetes.io/name": "orders", "tier": "", "v": "1.2_3-a", "example.com/team": "a"}
    )


def query(text: str) -> labelselectors.Selector:
    return labelselectors.parse_query(text, field="--pod-selector")


@pytest.mark.parametrize(
    ("text", "written", "labels", "selected"),
    [
        ("", "", {}, True),
        ("app.kubernetes.io/part-of=eventhub-balancer", None, {"app": "x"}, False),
        (
            "app.kubernetes.io/part-of==eventhub-balancer",
            "app.kubernetes.io/part-of=eventhub-balancer",
            {"app.kubernetes.io/part-of": "eventhub-balancer"},
            True,
        ),
        ("team in (a, b),!legacy", "team in (a,b),!legacy", {"team": "b"}, True),
        ("team in (a,b),!legacy", None, {"team": "b", "legacy": ""}, False),
        ("team notin (a),env!=dev", "team notin (a),env notin (dev)", {"env": "prod"}, True),
        ("team", None, {"team": ""}, True),
        ("team", None, {}, False),
        # Two values of one key: both must hold, as the API server reads it (none can).
        ("a=1,a=2", "a=1,a in (2)", {"a": "1"}, False),
    ],
)
def test_a_written_selector_reads_as_kubectl_writes_it(
    text: str, written: str | None, labels: dict[str, str], selected: bool
) -> None:
    selector = query(text)
    assert selector.to_query() == (text if written is None else written)
    assert selector.matches(labels) is selected


@pytest.mark.parametrize(
    "text",
    ["a b", "!a=b", "a=b,,c", "tier in (a", "tier in ()", "Bad Key=1", "a=b c", "a in (x y)"],
)
def test_a_written_selector_the_api_server_would_refuse_is_refused_naming_the_flag(
    text: str,
) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        query(text)
    assert caught.value.field == "--pod-selector"


def test_both_selects_what_each_selects() -> None:
    spec = parse({"matchLabels": {"app": "orders"}})
    scoped = spec.both(query("app.kubernetes.io/part-of=eventhub-balancer,!legacy"))
    assert scoped.to_query() == "app=orders,app.kubernetes.io/part-of=eventhub-balancer,!legacy"
    assert scoped.matches({"app": "orders", "app.kubernetes.io/part-of": "eventhub-balancer"})
    assert not scoped.matches({"app": "orders"})
    assert spec.both(None) is spec
    assert spec.both(spec) == spec
    # One key, two values: nothing can match, as the API server would read the query.
    assert not spec.both(query("app=billing")).matches({"app": "orders"})
    assert not spec.both(query("app=billing")).matches({"app": "billing"})
