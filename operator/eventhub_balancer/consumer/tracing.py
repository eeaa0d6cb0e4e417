"""OpenTelemetry spans for the consumer's batches: the optional extra ``otel``.

Users correlate a consumer's work with the producer that sent the events. Producers (the
Event Hubs SDKs, or anything instrumented with OpenTelemetry) put the W3C trace context on
each event as the ``traceparent`` property, or as ``Diagnostic-Id`` (the SDKs' older name,
same format). A batch holds events of many traces, so its span is not a child of any of
them: it *links* to them (the OpenTelemetry messaging conventions for batch receives).

Tracing is on only when the extra is installed and the ``OTEL_*`` environment names an
exporter (``OTEL_TRACES_EXPORTER``, or an OTLP endpoint); otherwise nothing is imported and
the handler is called as before. The SDK reads the rest of its settings from the environment
itself (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_*``,
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from eventhub_balancer import errors
from eventhub_balancer.consumer import contexts

if TYPE_CHECKING:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from eventhub_balancer.consumer import processing

logger = logging.getLogger(__name__)

SPAN_NAME = "eventhub.process"
#: Event properties that carry a W3C trace context, in order of preference.
TRACE_PROPERTIES = ("traceparent", "Diagnostic-Id")
#: Links per span: a 500-event batch would otherwise carry 500, most of them from the same
#: few traces, and backends drop links past 128 (the SDK's OTEL_SPAN_LINK_COUNT_LIMIT).
MAX_LINKS = 32
#: service.name when OTEL_SERVICE_NAME does not say (the SDK's own default is
#: "unknown_service", which tells nobody anything).
DEFAULT_SERVICE_NAME = "eventhub-balancer-consumer"
#: The SDK's entry-point group of span exporters (what OTEL_TRACES_EXPORTER names).
EXPORTER_GROUP = "opentelemetry_traces_exporter"
#: OTEL_EXPORTER_OTLP_PROTOCOL -> the exporter that speaks it, as the SDK maps "otlp".
OTLP_PROTOCOLS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}


def exporter_names(env: Mapping[str, str]) -> tuple[str, ...]:
    """The exporters the environment asks for; empty when tracing is off.

    The OpenTelemetry default for OTEL_TRACES_EXPORTER is "otlp", but a pod that sets no
    OTEL_* variable has no collector to send to: tracing is on only when something is said.
    """
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    raw = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if not raw:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        raw = "otlp" if endpoint else ""
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if "none" in names:
        return ()
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    ) or "grpc"
    resolved: list[str] = []
    for name in names:
        if name == "otlp":
            if protocol not in OTLP_PROTOCOLS:
                raise errors.InvalidInput(
                    "OTEL_EXPORTER_OTLP_PROTOCOL",
                    f"{protocol!r} is not one of {', '.join(sorted(OTLP_PROTOCOLS))}",
                )
            name = OTLP_PROTOCOLS[protocol]
        resolved.append(name)
    return tuple(dict.fromkeys(resolved))


def available() -> bool:
    """Whether the ``otel`` extra (the SDK) is installed."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _exporter_class(name: str) -> Callable[[], Any]:
    found = {e.name: e for e in metadata.entry_points(group=EXPORTER_GROUP)}
    if name not in found:
        raise errors.InvalidInput(
            "OTEL_TRACES_EXPORTER",
            f"no span exporter {name!r} is installed; installed: {', '.join(sorted(found))}",
        )
    exporter: Callable[[], Any] = found[name].load()
    return exporter


def configure(env: Mapping[str, str]) -> TracerProvider | None:
    """A tracer provider exporting where OTEL_* says, or None when tracing is off.

    The caller shuts it down at exit (that flushes the spans still queued).
    """
    names = exporter_names(env)
    if not names:
        return None
    if not available():
        logger.warning(
            "OTEL_* asks for traces but the otel extra is not installed "
            "(pip install 'eventhub-balancer[otel]'): no spans"
        )
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    classes = [_exporter_class(name) for name in names]  # a typo fails before anything starts
    # Resource.create adds OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over this default.
    provider = TracerProvider(resource=Resource.create({"service.name": DEFAULT_SERVICE_NAME}))
    for exporter in classes:
        provider.add_span_processor(BatchSpanProcessor(exporter()))
    logger.info("tracing batches to %s", ", ".join(names))
    return provider


def _text(value: Any) -> str | None:
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def trace_context(properties: Mapping[Any, Any]) -> str | None:
    """The event's W3C traceparent, from ``traceparent`` or ``Diagnostic-Id``.

    AMQP application properties arrive with bytes keys and values from the SDK, str from
    the emulator and tests: both are read.
    """
    by_name = {_text(k): v for k, v in properties.items()}
    for name in TRACE_PROPERTIES:
        if name in by_name and (text := _text(by_name[name])) is not None:
            return text.strip()
    return None


def links(events: Sequence[contexts.ReceivedEvent]) -> list[trace.Link]:
    """A link per distinct, valid trace context of the batch, at most MAX_LINKS."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation import tracecontext

    propagator = tracecontext.TraceContextTextMapPropagator()
    found: dict[tuple[int, int], trace.Link] = {}
    for event in events:
        if len(found) >= MAX_LINKS:
            break
        header = trace_context(event.properties)
        if header is None:
            continue
        # The propagator validates the format (version, lengths, all-zero ids).
        span_context = trace.get_current_span(
            propagator.extract({"traceparent": header})
        ).get_span_context()
        if not span_context.is_valid:
            continue
        key = (span_context.trace_id, span_context.span_id)
        found.setdefault(key, trace.Link(span_context))
    return list(found.values())


def attributes(context: contexts.BatchContext) -> dict[str, str | int]:
    """What identifies the batch: the messaging conventions' names, and ours for the rest."""
    return {
        "messaging.system": "eventhubs",
        "messaging.operation.type": "process",
        "messaging.destination.partition.id": context.partition,
        "messaging.batch.message_count": context.size,
        "eventhub_balancer.consumer": context.consumer,
        "eventhub_balancer.pod": context.pod,
        "eventhub_balancer.epoch": context.epoch,
        "eventhub_balancer.sequence_number.first": context.first_sequence_number,
        "eventhub_balancer.sequence_number.last": context.last_sequence_number,
        "eventhub_balancer.attempt": context.attempt,
    }


class TracingProcessor:
    """Calls the inner processor inside one span per batch (see the module's docstring).

    The span is current while the handler runs (threads get a copy of the context), so the
    handler's own spans become its children.
    """

    def __init__(self, inner: processing.BatchProcessor, *, tracer: trace.Tracer) -> None:
        self.inner = inner
        self.tracer = tracer

    async def __call__(
        self, events: Sequence[contexts.ReceivedEvent], context: contexts.BatchContext
    ) -> None:
        from opentelemetry import trace

        with self.tracer.start_as_current_span(
            SPAN_NAME,
            kind=trace.SpanKind.CONSUMER,
            links=links(events),
            attributes=attributes(context),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                await self.inner(events, context)
            except asyncio.CancelledError:
                # A release or shutdown, not a failure of the handler.
                span.set_attribute("eventhub_balancer.cancelled", True)
                raise
            except Exception as e:
                span.record_exception(e)
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(e).__name__))
                raise


#: The provider ``start`` set up for this process (None: tracing is off).
_active: TracerProvider | None = None


def start(env: Mapping[str, str]) -> TracerProvider | None:
    """Set up tracing for this process from OTEL_*: ``configure``, made the global provider.

    Global so that the spans a handler starts itself (``trace.get_tracer(...)``) are
    exported too, as children of the batch's span.
    """
    global _active
    provider = configure(env)
    if provider is not None:
        from opentelemetry import trace

        trace.set_tracer_provider(provider)
    _active = provider
    return provider


def stop() -> None:
    """Flush and end what ``start`` set up: spans still queued are exported now."""
    global _active
    provider, _active = _active, None
    if provider is not None:
        provider.shutdown()


def instrument(
    processor: processing.BatchProcessor, provider: TracerProvider | None = None
) -> processing.BatchProcessor:
    """``processor`` traced with ``provider`` (default: ``start``'s); itself when tracing is off."""
    provider = provider if provider is not None else _active
    if provider is None:
        return processor
    return TracingProcessor(processor, tracer=provider.get_tracer("eventhub_balancer.consumer"))
