"""`javalogs.shorten` leaves alone what is not Spark's defaults profile: a Spark Connect
client (no JVM here) and a log4j configuration of the user's. The swap itself runs on a real
JVM in `tests/spark/wire/test_sessions.py`."""

from __future__ import annotations

import types
from typing import Any

from eventhub_balancer.spark import javalogs


def jvm_with_pattern(pattern: str) -> Any:
    layout = types.SimpleNamespace(getConversionPattern=lambda: pattern)
    appender = types.SimpleNamespace(getLayout=lambda: layout)
    config = types.SimpleNamespace(getAppender=lambda name: appender)
    context = types.SimpleNamespace(getConfiguration=lambda: config)
    manager = types.SimpleNamespace(getContext=lambda shared: context)
    log4j = types.SimpleNamespace(LogManager=manager)
    return types.SimpleNamespace(
        org=types.SimpleNamespace(
            apache=types.SimpleNamespace(logging=types.SimpleNamespace(log4j=log4j))
        )
    )


def test_a_connect_client_has_no_jvm_to_change() -> None:
    assert javalogs.shorten(types.SimpleNamespace()) is False


def test_a_configuration_of_the_users_is_left_as_it_is() -> None:
    session = types.SimpleNamespace(_jvm=jvm_with_pattern("%d %p %c: %m%n%ex{full}"))
    assert javalogs.shorten(session) is False


def test_a_jvm_that_refuses_leaves_sparks_lines_whole() -> None:
    session = types.SimpleNamespace(_jvm=jvm_with_pattern(javalogs.SPARKS_PATTERN))
    assert javalogs.shorten(session) is False  # the fake has no PatternLayout to build
