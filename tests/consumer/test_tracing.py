"""A span per batch, linked to the events' trace contexts, exported where OTEL_* says.

Spans go to the SDK's in-memory exporter; nothing here waits for a timer.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eventhub_balancer import errors
from eventhub_balancer.consumer import contexts, metrics, partitions, processing, tracing
from tests.support import consumerfakes

CONTEXT = contexts.BatchContext(
    partition="3",
    epoch=7,
    consumer="orders",
    pod="orders-0",
    first_sequence_number=100,
    last_sequence_number=102,
    size=3,
    attempt=2,
)
TRACE_A = "0af7651916cd43dd8448eb211c80319c"
TRACE_B = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_A = "b7ad6b7169203331"
SPAN_B = "00f067aa0ba902b7"


def event(n: int, properties: Mapping[Any, Any] | None = None) -> contexts.ReceivedEvent:
    return contexts.ReceivedEvent(
        partition="3",
        sequence_number=n,
        offset=str(n),
        enqueued_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        partition_key=None,
        properties=dict(properties or {}),
        body=b"x",
    )


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.clear()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


class Handler:
    """Records the batches; raises ``error`` when given."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.calls: list[int] = []

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        self.calls.append(len(events))
        if self.error is not None:
            raise self.error


async def test_one_span_per_batch_with_the_batch_attributes(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    handler = Handler()
    traced = tracing.instrument(handler, provider)
    await traced([event(100), event(101), event(102)], CONTEXT)
    await traced([event(103)], CONTEXT)

    spans = exporter.get_finished_spans()
    assert handler.calls == [3, 1]
    assert [s.name for s in spans] == ["eventhub.process", "eventhub.process"]
    span = spans[0]
    assert span.kind == trace.SpanKind.CONSUMER
    assert dict(span.attributes or {}) == {
        "messaging.system": "eventhubs",
        "messaging.operation.type": "process",
        "messaging.destination.partition.id": "3",
        "messaging.batch.message_count": 3,
        "eventhub_balancer.consumer": "orders",
        "eventhub_balancer.pod": "orders-0",
        "eventhub_balancer.epoch": 7,
        "eventhub_balancer.sequence_number.first": 100,
        "eventhub_balancer.sequence_number.last": 102,
        "eventhub_balancer.attempt": 2,
    }
    assert span.status.status_code == trace.StatusCode.UNSET


async def test_links_come_from_traceparent_and_diagnostic_id(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    events = [
        event(1, {"traceparent": f"00-{TRACE_A}-{SPAN_A}-01"}),
        # The SDK hands AMQP application properties over as bytes.
        event(2, {b"Diagnostic-Id": f"00-{TRACE_B}-{SPAN_B}-00".encode()}),
        event(3, {"traceparent": f"00-{TRACE_A}-{SPAN_A}-01"}),  # the same context once
    ]
    await tracing.instrument(Handler(), provider)(events, CONTEXT)

    (span,) = exporter.get_finished_spans()
    linked = [(link.context.trace_id, link.context.span_id) for link in span.links]
    assert linked == [(int(TRACE_A, 16), int(SPAN_A, 16)), (int(TRACE_B, 16), int(SPAN_B, 16))]
    assert all(link.context.is_remote for link in span.links)
    # A link is not a parent: the batch span starts a trace of its own.
    assert span.parent is None
    assert span.context.trace_id not in (int(TRACE_A, 16), int(TRACE_B, 16))


async def test_no_links_for_events_without_a_valid_context(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    events = [
        event(1),
        event(2, {"traceparent": "not-a-traceparent"}),
        event(3, {"Diagnostic-Id": f"00-{'0' * 32}-{SPAN_A}-01"}),  # an all-zero trace id
        event(4, {"traceparent": b"\xff\xfe"}),
    ]
    await tracing.instrument(Handler(), provider)(events, CONTEXT)

    (span,) = exporter.get_finished_spans()
    assert list(span.links) == []


async def test_links_are_bounded(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    events = [
        event(n, {"traceparent": f"00-{n + 1:032x}-{SPAN_A}-01"})
        for n in range(tracing.MAX_LINKS * 3)
    ]
    await tracing.instrument(Handler(), provider)(events, CONTEXT)

    (span,) = exporter.get_finished_spans()
    assert len(span.links) == tracing.MAX_LINKS


async def test_a_handler_error_is_recorded_on_the_span_and_raised(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    traced = tracing.instrument(Handler(ValueError("bad row")), provider)
    with pytest.raises(ValueError, match="bad row"):
        await traced([event(1)], CONTEXT)

    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.status.description == "ValueError"
    (recorded,) = span.events
    assert recorded.name == "exception"
    assert (recorded.attributes or {})["exception.message"] == "bad row"


async def test_a_cancelled_batch_is_marked_not_failed(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    traced = tracing.instrument(Handler(asyncio.CancelledError()), provider)
    with pytest.raises(asyncio.CancelledError):
        await traced([event(1)], CONTEXT)

    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.UNSET
    assert (span.attributes or {})["eventhub_balancer.cancelled"] is True


async def test_a_sync_handlers_own_spans_are_children_of_the_batch_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("handler")

    def handler(events: object, context: object) -> None:  # runs in a worker thread
        with tracer.start_as_current_span("write-rows"):
            pass

    await tracing.instrument(processing.PlainProcessor(handler), provider)([event(1)], CONTEXT)

    child, batch = exporter.get_finished_spans()
    assert (child.name, batch.name) == ("write-rows", "eventhub.process")
    assert child.parent is not None
    assert child.parent.span_id == batch.context.span_id


def test_without_tracing_set_up_the_processor_is_unchanged() -> None:
    handler = Handler()
    assert processing.traced(handler) is handler
    assert tracing.instrument(handler, None) is handler


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, ()),  # nothing said: no collector to send to
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, ("otlp_proto_grpc",)),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            ("otlp_proto_http",),
        ),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ("console", "otlp_proto_grpc")),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, ()),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, ()),
    ],
)
def test_the_environment_says_whether_and_where_spans_go(
    env: dict[str, str], names: tuple[str, ...]
) -> None:
    assert tracing.exporter_names(env) == names


def test_a_wrong_protocol_or_exporter_names_the_variable_to_change() -> None:
    with pytest.raises(errors.InvalidInput, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        tracing.exporter_names(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "udp"}
        )
    with pytest.raises(errors.InvalidInput, match=r"OTEL_TRACES_EXPORTER.*'zipkn'"):
        tracing.configure({"OTEL_TRACES_EXPORTER": "zipkn"})


def test_configure_builds_a_provider_exporting_to_what_is_named() -> None:
    assert tracing.configure({}) is None
    provider = tracing.configure(
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    )
    assert provider is not None
    try:
        assert provider.resource.attributes["service.name"] == tracing.DEFAULT_SERVICE_NAME
        processors = provider._active_span_processor._span_processors
        (batching,) = processors
        assert type(getattr(batching, "span_exporter", None)).__module__.startswith(
            "opentelemetry.exporter.otlp.proto.http"
        )
    finally:
        provider.shutdown()


def test_start_sets_up_the_process_and_stop_flushes_and_ends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed: list[object] = []
    # The global provider can be set once per process: the test records the call instead.
    monkeypatch.setattr(trace, "set_tracer_provider", installed.append)
    handler = Handler()
    assert tracing.start({}) is None
    assert installed == []
    assert processing.traced(handler) is handler

    provider = tracing.start({"OTEL_TRACES_EXPORTER": "console"})
    try:
        assert provider is not None
        assert installed == [provider]
        assert isinstance(processing.traced(handler), tracing.TracingProcessor)
    finally:
        tracing.stop()
    assert processing.traced(handler) is handler


@pytest.mark.looptime
async def test_a_partition_worker_traces_each_attempt_of_each_batch(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    hub, store = consumerfakes.FakeHub(), consumerfakes.FakeStore()
    recorder = consumerfakes.Recorder()
    recorder.fail_next = 1
    worker = partitions.PartitionWorker(
        partition="0",
        epoch=1,
        consumer="orders",
        pod="pod-a",
        store=store.handle("pod-a"),
        open_receiver=hub.open,
        resolve_start=consumerfakes.resolve_nothing,
        processor=tracing.instrument(recorder, provider),
        settings=partitions.BatchSettings(
            batch_size=10, max_wait=0.05, retry_backoff=0.01, checkpoint_interval=3600
        ),
        stats=metrics.PartitionStats(),
    )
    task = asyncio.create_task(worker.run())
    hub.append("0", 3)
    await consumerfakes.eventually(lambda: len(recorder.done) == 3)
    worker.release()
    async with asyncio.timeout(60):
        await task

    spans = exporter.get_finished_spans()
    assert [(s.attributes or {})["eventhub_balancer.attempt"] for s in spans] == [1, 2]
    assert [s.status.status_code for s in spans] == [trace.StatusCode.ERROR, trace.StatusCode.UNSET]
    assert {(s.attributes or {})["messaging.batch.message_count"] for s in spans} == {3}
