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
