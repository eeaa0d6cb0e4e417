"""``--log-format json``: one object per record, with the consumer, pod and partition fields."""

from __future__ import annotations

import json
import logging
import sys

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
