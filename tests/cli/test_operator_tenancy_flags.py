"""``ehb operator``'s tenancy flags: hosts bound to namespaces, and the namespaces lent the
operator's identity; a mistake is one message that says what to write."""

from __future__ import annotations

import argparse

import pytest

from eventhub_balancer import errors
from eventhub_balancer.cli import operator_cmd


def parsed(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    operator_cmd.add_arguments(parser)
    return parser.parse_args(["-A", *flags])


def test_bind_location_takes_hosts_and_urls() -> None:
    bindings = operator_cmd.bindings(
        parsed(
            "--bind-location",
            "shop=ShopCheckpoints.blob.core.windows.net",
            "--bind-location",
            "pay=https://pay.servicebus.windows.net/",
        )
    )
    assert dict(bindings.hosts) == {
        "shopcheckpoints.blob.core.windows.net": "shop",
        "pay.servicebus.windows.net": "pay",
    }
    assert operator_cmd.bindings(parsed()).hosts == ()


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("shop.blob.core.windows.net", "is not NS=HOST"),
        ("=shop.blob.core.windows.net", "is not NS=HOST"),
        ("shop=", "is not NS=HOST"),
    ],
)
def test_a_malformed_binding_says_what_to_write(value: str, complaint: str) -> None:
    with pytest.raises(errors.InvalidInput, match=complaint):
        operator_cmd.bindings(parsed("--bind-location", value))


def test_a_host_bound_to_two_namespaces_is_refused() -> None:
    with pytest.raises(errors.InvalidInput, match="bound to two namespaces"):
        operator_cmd.bindings(
            parsed(
                "--bind-location",
                "a=x.blob.core.windows.net",
                "--bind-location",
                "b=x.blob.core.windows.net",
            )
        )


def test_metrics_are_https_behind_reviews_unless_plain_on_loopback() -> None:
    class NoReviews:
        """Never asked here: only the options are built."""

    secure = operator_cmd.serving_options(parsed(), reviews=NoReviews())  # type: ignore[arg-type]
    assert (secure.metrics_host, secure.metrics_port) == ("0.0.0.0", 8443)
    assert secure.metrics_tls is not None
    assert len(secure.metrics_middlewares) == 1
    with pytest.raises(errors.InvalidInput, match=r"give --metrics-host 127\.0\.0\.1"):
        operator_cmd.serving_options(parsed("--metrics-insecure"), reviews=None)
    plain = operator_cmd.serving_options(
        parsed("--metrics-insecure", "--metrics-host", "127.0.0.1"), reviews=None
    )
    assert (plain.metrics_tls, tuple(plain.metrics_middlewares)) == (None, ())
