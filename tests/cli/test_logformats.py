"""``--log-format json``: one object per record, with the consumer, pod and partition fields."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from eventhub_balancer import cli
from eventhub_balancer.cli import logformats


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("eventhub_balancer.x", logging.INFO, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def formatted(made: logging.LogRecord, **identity: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(logformats.JsonFormatter(identity=identity).format(made))
    return loaded


def test_the_consumer_runtime_records_carry_pod_and_partition() -> None:
    body = formatted(
        record("partition %s: epoch %d failed: %s", "7", 3, "boom"),
        consumer="orders",
        pod="orders-0",
        namespace="shop",
    )
    assert body["message"] == "partition 7: epoch 3 failed: boom"
    assert (body["consumer"], body["pod"], body["namespace"], body["partition"]) == (
        "orders",
        "orders-0",
        "shop",
        "7",
    )
    assert body["level"] == "INFO"
    assert body["logger"] == "eventhub_balancer.x"


def test_the_operator_records_carry_namespace_consumer_and_partition() -> None:
    body = formatted(
        record("%s/%s: %s partition %s %s -> %s", "shop", "orders", "assign", "12", "a", "b")
    )
    assert (body["namespace"], body["consumer"], body["partition"]) == ("shop", "orders", "12")
    assert "pod" not in body
    keyed = formatted(record("%s: Event Hubs: %s", "shop/orders", "unreachable"))
    assert (keyed["namespace"], keyed["consumer"]) == ("shop", "orders")


def test_kopf_references_and_explicit_fields_win() -> None:
    ref = {"kind": "EventHubConsumer", "name": "orders", "namespace": "shop"}
    body = formatted(record("handler failed", k8s_ref=ref))
    assert (body["consumer"], body["namespace"]) == ("orders", "shop")
    explicit = formatted(record("partition %s: x", "1", partition="2"))
    assert explicit["partition"] == "2"


def test_exceptions_stay_inside_the_one_line() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        made = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = logformats.JsonFormatter().format(made)
    assert "\n" not in line
    assert "ValueError: bad" in json.loads(line)["exception"]


def test_a_percent_sign_does_not_shift_the_fields() -> None:
    body = formatted(record("100%% of partition %s", "4"))
    assert body["partition"] == "4"


@pytest.fixture
def sdk_levels() -> Iterator[None]:
    """The SDKs' loggers' levels put back after the test."""
    names = (*logformats.SDK_LOGGERS, logformats.HTTP_LOGGER)
    kept = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in kept.items():
        logging.getLogger(name).setLevel(level)


#: Loggers the SDKs write their AMQP chatter to (azure-eventhub 5.15's own AMQP layer).
CHATTY = ("azure.eventhub._pyamqp.link", "azure.eventhub._pyamqp.aio._connection_async")


@pytest.mark.parametrize("verbosity", [[], ["-v"]])
@pytest.mark.usefixtures("sdk_levels")
def test_ehb_operator_leaves_the_sdks_info_out_below_vv(
    verbosity: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the root lets everything through: the SDKs' own level decides
    # The operator stops at once (no kubeconfig, no namespace), after logging is set up.
    assert cli.main([*verbosity, "operator", "--kubeconfig", "/nonexistent"]) in (1, 2)
    for name in CHATTY:
        assert not logging.getLogger(name).isEnabledFor(logging.INFO)
        assert logging.getLogger(name).isEnabledFor(logging.WARNING)


@pytest.mark.usefixtures("sdk_levels")
def test_ehb_operator_and_consume_show_the_sdks_debug_at_vv(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    assert cli.main(["-vv", "operator", "--kubeconfig", "/nonexistent"]) in (1, 2)
    for name in CHATTY:
        assert logging.getLogger(name).isEnabledFor(logging.DEBUG)
    logformats.quiet_sdk_loggers(logging.INFO)  # ehb consume -v: the same helper
    assert not logging.getLogger(CHATTY[0]).isEnabledFor(logging.INFO)
    logformats.quiet_sdk_loggers(logging.DEBUG)
    assert all(logging.getLogger(n).level == logging.NOTSET for n in logformats.SDK_LOGGERS)


@pytest.mark.usefixtures("sdk_levels")
def test_the_http_librarys_retry_warnings_wait_for_vv() -> None:
    retries = logging.getLogger("urllib3.connectionpool")
    logformats.quiet_sdk_loggers(logging.INFO)
    assert not retries.isEnabledFor(logging.WARNING)
    assert retries.isEnabledFor(logging.ERROR)
    logformats.quiet_sdk_loggers(logging.DEBUG)
    assert retries.isEnabledFor(logging.WARNING)
