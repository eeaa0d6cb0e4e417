"""Handlers are checked against their mode's protocol at start, before anything connects."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from eventhub_balancer import consumer, errors
from eventhub_balancer.consumer import protocols
from tests.support import paths

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def plain(events: Sequence[consumer.Event], context: consumer.BatchContext) -> None:
    return None


async def asynchronous(events: Sequence[consumer.Event], context: consumer.BatchContext) -> None:
    return None


def spark(df: Any, context: consumer.TriggerContext) -> None:
    return None


class Callable:
    def __call__(self, events: object, context: object) -> None:
        return None


def test_the_protocols_are_exported_and_typed() -> None:
    handler: consumer.Handler = plain
    also: consumer.Handler = asynchronous
    spark_handler: consumer.SparkHandler = spark
    assert {handler, also, spark_handler} == {plain, asynchronous, spark}
    assert {"Handler", "SparkHandler"} <= set(consumer.__all__)


@pytest.mark.parametrize(
    "function",
    [plain, asynchronous, Callable(), lambda *args: None, lambda e, c, extra=1: None],
)
def test_two_argument_handlers_pass(function: Any) -> None:
    protocols.check(function, reference="m:f", spark=False)


@pytest.mark.parametrize(
    ("function", "takes"),
    [
        (lambda events: None, "(events)"),
        (lambda: None, "()"),
        (lambda events, context, batch: None, "(events, context, batch)"),
        (lambda events, *, context: None, "(events, context)"),
    ],
)
def test_other_shapes_are_refused_with_what_a_handler_takes(function: Any, takes: str) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        protocols.check(function, reference="m:f", spark=False)
    assert f"m:f takes {takes}" in str(caught.value)
    assert "process(events, context)" in str(caught.value)


def test_a_spark_handler_is_a_plain_function() -> None:
    protocols.check(spark, reference="m:f", spark=True)
    with pytest.raises(errors.InvalidInput, match="drop async"):
        protocols.check(asynchronous, reference="m:f", spark=True)


def dataframe_only(df: DataFrame, context: Any) -> None:
    return None


def test_a_handler_annotated_for_the_other_mode_is_refused_at_start() -> None:
    """A Spark handler started without --spark was called with a list of events and failed
    every batch (``AttributeError: 'list' object has no attribute 'withColumn'``) until its
    partitions were parked; `ehb deadletters replay --through-handler` said the same."""
    for function, given in (
        (spark, "df: Any, context: consumer.TriggerContext"),
        (dataframe_only, "df: DataFrame, context: Any"),
    ):
        with pytest.raises(errors.InvalidInput) as caught:
            protocols.check(function, reference="m:f", spark=False)
        assert str(caught.value) == (
            f"--handler: m:f is a Spark handler ({given}), but it would be called as "
            "process(events, context) with a list of events: give --spark (spark.enabled in "
            "the consumer chart)"
        )
    with pytest.raises(errors.InvalidInput) as caught:
        protocols.check(plain, reference="m:f", spark=True)
    assert "m:f is a plain handler (events: Sequence[consumer.Event], context: " in str(
        caught.value
    )
    assert str(caught.value).endswith(
        "but it would be called as process(df, context) with one DataFrame: drop --spark "
        "(spark.enabled in the consumer chart)"
    )
    # Whoever calls says what to do instead.
    with pytest.raises(errors.InvalidInput, match=r"with a list of events: use the hub$"):
        protocols.check(spark, reference="m:f", spark=False, remedy="use the hub")
    # Annotations that say neither mode, or both, decide nothing.
    for either in (Callable(), lambda df, context: None, both):
        protocols.check(either, reference="m:f", spark=False)
        protocols.check(either, reference="m:f", spark=True)


def both(df: DataFrame, context: consumer.BatchContext) -> None:
    return None


def test_the_example_spark_pipeline_needs_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(errors.InvalidInput, match=r"is a Spark handler .*give --spark"):
        protocols.load(
            "minute_counts.pipeline:process", search_path=[str(paths.EXAMPLES)], spark=False
        )
    assert protocols.load(
        "minute_counts.pipeline:process", search_path=[str(paths.EXAMPLES)], spark=True
    )


def test_a_missing_dependency_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "ehb_dep_pipeline.py").write_text(
        textwrap.dedent(
            """
            from ehb_missing_lib import transform

            def process(events, context):
                return transform(events)
            """
        )
    )
    with pytest.raises(errors.InvalidInput, match="imports 'ehb_missing_lib'"):
        protocols.load("ehb_dep_pipeline:process", search_path=[str(tmp_path)], spark=False)
    # The module itself missing is still reported as such.
    with pytest.raises(errors.InvalidInput, match="cannot import module 'ehb_absent'"):
        protocols.load("ehb_absent:process", spark=False)
    with pytest.raises(errors.InvalidInput, match=r"cannot import module 'ehb_absent_pkg\.mod'"):
        protocols.load("ehb_absent_pkg.mod:process", spark=False)


def generating(events: Sequence[consumer.Event], context: consumer.BatchContext) -> Any:
    yield from events


async def async_generating(events: Sequence[consumer.Event], context: consumer.BatchContext) -> Any:
    for event in events:
        yield event


class Generating:
    def __call__(self, events: object, context: object) -> Any:
        yield events


@pytest.mark.parametrize(
    "function",
    [generating, async_generating, Generating()],
    ids=["generator", "async generator", "callable object"],
)
@pytest.mark.parametrize("spark", [False, True], ids=["plain", "spark"])
def test_a_handler_with_a_yield_is_refused_at_start(function: Any, spark: bool) -> None:
    """Called, it returns a generator and runs nothing: the runtime would checkpoint batches
    that no code ever saw."""
    with pytest.raises(errors.InvalidInput) as caught:
        protocols.check(function, reference="m:f", spark=spark)
    assert "m:f is a generator" in str(caught.value)
    assert "remove the yield" in str(caught.value)
