import pytest

from eventhub_balancer_devstack.kube import selectors


def _pod(labels: dict[str, str], phase: str = "Running") -> dict[str, object]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=a", {"app": "a"}, True),
        ("app==a", {"app": "b"}, False),
        ("app!=a", {"app": "b"}, True),
        ("app!=a", {}, True),
        ("app in (a, b)", {"app": "b"}, True),
        ("app in (a,b)", {"app": "c"}, False),
        ("app notin (a,b)", {"app": "c"}, True),
        ("app notin (a,b)", {"app": "a"}, False),
        ("app", {"app": "x"}, True),
        ("app", {}, False),
        ("!app", {}, True),
        ("!app", {"app": "x"}, False),
        ("app=a,tier in (web),!legacy", {"app": "a", "tier": "web"}, True),
        ("app=a,tier in (web),!legacy", {"app": "a", "tier": "web", "legacy": "1"}, False),
        (
            "eventhub-balancer.dev/consumer=orders",
            {"eventhub-balancer.dev/consumer": "orders"},
            True,
        ),
        ("", {"anything": "x"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    parsed = selectors.parse(labels=selector, fields=None)
    assert parsed.matches(_pod(labels)) is expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("metadata.name=p", True),
        ("metadata.name!=p", False),
        ("metadata.namespace==ns", True),
        ("status.phase=Running", True),
        ("status.phase=Pending", False),
        ("metadata.name=p,status.phase!=Failed", True),
        ("spec.nodeName=", True),  # absent fields compare as ""
    ],
)
def test_field_selectors(selector: str, expected: bool) -> None:
    parsed = selectors.parse(labels=None, fields=selector)
    assert parsed.matches(_pod({})) is expected


@pytest.mark.parametrize("bad", ["app in (a", "=a", "a b c"])
def test_invalid_label_selectors_are_refused(bad: str) -> None:
    with pytest.raises(selectors.SelectorError):
        selectors.parse_labels(bad)


def test_field_selector_without_operator_is_refused() -> None:
    with pytest.raises(selectors.SelectorError):
        selectors.parse_fields("metadata.name")
