"""``ehb consume``: run a consumer pod's runtime with the user's handler."""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from eventhub_balancer import errors
from eventhub_balancer.cli import flagtypes
from eventhub_balancer.contracts import specvalues

COMMAND = ("consume",)
HELP = "process the partitions the operator assigns to this pod with your handler"
#: Where handler calls are noted by default (`consumer.crashmarkers.DEFAULT_DIRECTORY`): the
#: consumer chart mounts an emptyDir at /tmp. Spelled here so that ``--help`` imports no
#: runtime.
DEFAULT_CRASH_MARKER_DIR = Path(tempfile.gettempdir()) / "ehb-crash-markers"


def _number(
    kind: type[int] | type[float], env: str, *, least: float | None = None, positive: bool = False
) -> Callable[[str], int | float]:
    """`flagtypes.number` for a flag that an environment variable sets too: argparse parses a
    string default with the flag's type, so a bad variable fails as a bad flag does, in one
    line that names both (and only for the command that has the flag)."""
    return flagtypes.number(
        kind, least=least, positive=positive, source=f"from the flag or env {env}"
    )


def _env(name: str, fallback: str) -> str:
    """The environment's value as the flag's default (an empty variable counts as unset)."""
    return os.environ.get(name) or fallback


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--handler",
        required=True,
        metavar="MODULE:FUNCTION",
        help="your function: process(events, context), or process(df, context) with --spark",
    )
    parser.add_argument(
        "--handler-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory to import the handler from (repeatable; PYTHONPATH works too)",
    )
    spark = parser.add_argument_group("Spark")
    spark.add_argument(
        "--spark",
        action="store_true",
        help="hand the handler one DataFrame per trigger, over all the pod's partitions",
    )
    spark.add_argument(
        "--spark-master",
        default=os.environ.get("EHB_SPARK_MASTER"),
        help="the Spark master, e.g. spark://host:7077 (env EHB_SPARK_MASTER; default local[2])",
    )
    spark.add_argument(
        "--spark-remote",
        default=os.environ.get("EHB_SPARK_REMOTE"),
        metavar="sc://HOST:PORT",
        help="run through a Spark Connect server instead of a driver in the pod "
        "(env EHB_SPARK_REMOTE)",
    )
    spark.add_argument(
        "--trigger-interval",
        type=_number(float, "EHB_TRIGGER_INTERVAL", least=0),
        default=_env("EHB_TRIGGER_INTERVAL", "0.0"),
        metavar="SECONDS",
        help="seconds from one trigger's start to the next's; 0: back to back "
        "(env EHB_TRIGGER_INTERVAL; default 0)",
    )
    spark.add_argument(
        "--max-events-per-trigger",
        type=_number(int, "EHB_MAX_EVENTS_PER_TRIGGER", least=1),
        default=_env("EHB_MAX_EVENTS_PER_TRIGGER", "20000"),
        metavar="N",
        help="the most events one trigger takes, in whole batches "
        "(env EHB_MAX_EVENTS_PER_TRIGGER; default 20000)",
    )
    spark.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable)",
    )
    batching = parser.add_argument_group("batches and checkpoints")
    batching.add_argument(
        "--handler-concurrency",
        type=_number(int, "EHB_HANDLER_CONCURRENCY", least=1),
        default=_env("EHB_HANDLER_CONCURRENCY", "32"),
        metavar="N",
        help="sync handler calls that may run at once, a thread each "
        "(env EHB_HANDLER_CONCURRENCY; default 32)",
    )
    batching.add_argument(
        "--batch-size",
        type=_number(int, "EHB_BATCH_SIZE", least=1),
        default=_env("EHB_BATCH_SIZE", "500"),
        help="the most events in one batch (env EHB_BATCH_SIZE; default 500)",
    )
    batching.add_argument(
        "--prefetch",
        type=_number(int, "EHB_PREFETCH", least=1),
        default=_env("EHB_PREFETCH", "300"),
        metavar="N",
        help="events each partition's receive link may deliver ahead of the runtime's buffer; "
        "a partition holds at most max(4 x batch size, 2 x N) + 3 x N events ahead of its "
        "handler (env EHB_PREFETCH; default 300)",
    )
    batching.add_argument(
        "--max-wait",
        type=_number(float, "EHB_MAX_WAIT", positive=True),
        default=_env("EHB_MAX_WAIT", "1.0"),
        help="seconds a batch waits for more events after its first (env EHB_MAX_WAIT; default 1)",
    )
    batching.add_argument(
        "--checkpoint-interval",
        type=_number(float, "EHB_CHECKPOINT_INTERVAL", least=0),
        default=_env("EHB_CHECKPOINT_INTERVAL", "0.0"),
        help="0: checkpoint after every batch; N: at most every N seconds (default 0)",
    )
    batching.add_argument(
        "--stuck-seconds",
        type=_number(float, "EHB_STUCK_SECONDS", positive=True),
        default=_env("EHB_STUCK_SECONDS", "120.0"),
        help="a handler call running longer is reported stuck to the operator (env "
        "EHB_STUCK_SECONDS; default 120)",
    )
    batching.add_argument(
        "--release-timeout",
        type=_number(float, "EHB_RELEASE_TIMEOUT", positive=True),
        default=_env("EHB_RELEASE_TIMEOUT", "20.0"),
        help="on revocation, the longest wait for the in-flight batch (default 20)",
    )
    batching.add_argument(
        "--handler-exit-seconds",
        type=_number(float, "EHB_HANDLER_EXIT_SECONDS", positive=True),
        default=_env("EHB_HANDLER_EXIT_SECONDS", "5.0"),
        help="past the release timeout, how long a handler that cannot be cancelled (a sync "
        "handler) may still run before the pod process exits so that the next owner never "
        "overlaps it; keep release timeout + this below handoffTimeoutSeconds (env "
        "EHB_HANDLER_EXIT_SECONDS; default 5)",
    )
    batching.add_argument(
        "--crash-marker-dir",
        type=flagtypes.given(
            "a folder", "give one on a volume that outlives the container, such as the chart's /tmp"
        ),
        default=_env("EHB_CRASH_MARKER_DIR", str(DEFAULT_CRASH_MARKER_DIR)),
        metavar="DIR",
        help="where each handler call is noted, so that a batch whose handler kills the "
        "process counts as a failed attempt after the container restarts; keep it on a "
        f"volume that outlives the container, such as an emptyDir (env EHB_CRASH_MARKER_DIR; "
        f"default {DEFAULT_CRASH_MARKER_DIR})",
    )
    batching.add_argument(
        "--shutdown-timeout",
        type=_number(float, "EHB_SHUTDOWN_TIMEOUT", positive=True),
        default=_env("EHB_SHUTDOWN_TIMEOUT", "25.0"),
        help="on SIGTERM, the longest graceful release of all partitions (default 25)",
    )
    where = parser.add_argument_group("identity and assignment")
    where.add_argument(
        "--consumer",
        default=os.environ.get("EHB_CONSUMER"),
        help="the EventHubConsumer's name (env EHB_CONSUMER)",
    )
    where.add_argument(
        "--pod-name",
        default=None,
        help="this pod's name (default: env POD_NAME, from the Downward API)",
    )
    where.add_argument(
        "--namespace", default=None, help="this pod's namespace (default: env POD_NAMESPACE)"
    )
    where.add_argument(
        "--kubeconfig", default=None, help="outside a cluster: the kubeconfig (default $KUBECONFIG)"
    )
    where.add_argument(
        "--assignment-file",
        type=Path,
        default=None,
        help="read the assignment from this ConfigMap-shaped JSON file instead of Kubernetes",
    )
    where.add_argument(
        "--ack-file",
        type=Path,
        default=None,
        help="with --assignment-file: write the acknowledgements here",
    )
    trust = parser.add_argument_group("where credentials may go")
    trust.add_argument(
        "--allowed-eventhub-suffix",
        action="append",
        default=[],
        metavar="SUFFIX",
        help="a DNS suffix Event Hubs hosts may have (repeatable; env "
        "EHB_ALLOWED_EVENTHUB_SUFFIXES, comma-separated; default .servicebus.windows.net)",
    )
    trust.add_argument(
        "--allowed-blob-suffix",
        action="append",
        default=[],
        metavar="SUFFIX",
        help="a DNS suffix Blob hosts may have (repeatable; env EHB_ALLOWED_BLOB_SUFFIXES; "
        "default .blob.core.windows.net)",
    )
    trust.add_argument(
        "--allow-development-endpoints",
        action="store_true",
        default=None,
        help="also allow the local emulators on loopback (env "
        "EHB_ALLOW_DEVELOPMENT_ENDPOINTS=true; the local stack only)",
    )
    serving = parser.add_argument_group("endpoints")
    serving.add_argument(
        "--host",
        type=flagtypes.listen_address,
        default=_env("EHB_HOST", "0.0.0.0"),
        help="address for /healthz, /readyz, /metrics (env EHB_HOST; default 0.0.0.0)",
    )
    serving.add_argument(
        "--port",
        type=flagtypes.port(source="from the flag or env EHB_PORT"),
        default=_env("EHB_PORT", "8080"),
        help="port for /healthz, /readyz, /metrics (env EHB_PORT; default 8080)",
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer.consumer import launching, partitions, settings, tracing, triggers

    in_kubernetes = args.assignment_file is None
    pod, namespace = settings.pod_identity(
        os.environ,
        pod=args.pod_name,
        namespace=args.namespace,
        need_namespace=in_kubernetes,
        consumer=args.consumer,
        need_consumer=in_kubernetes,
    )
    if in_kubernetes and not specvalues.is_object_name(args.consumer):
        # No consumer can have it: the pod waited for ever for a ConfigMap none would write.
        raise errors.InvalidInput(
            "EHB_CONSUMER",
            f"{args.consumer[:80]!r} is not an EventHubConsumer's name "
            f"({specvalues.OBJECT_NAME_RULE}): give its metadata.name (--consumer or env)",
        )
    if args.ack_file is not None and args.assignment_file is None:
        raise errors.InvalidInput("--ack-file", "only goes with --assignment-file")
    from eventhub_balancer.spark import flags

    config = settings.ConsumerSettings(
        pod=pod,
        namespace=namespace,
        consumer=args.consumer or "local",
        handler=args.handler,
        handler_path=tuple(args.handler_path),
        spark=args.spark,
        spark_master=args.spark_master,
        spark_remote=args.spark_remote,
        spark_conf=flags.parse_conf(args.spark_conf),
        trigger=triggers.TriggerSettings(
            interval=args.trigger_interval, max_events=args.max_events_per_trigger
        ),
        handler_concurrency=args.handler_concurrency,
        batch=partitions.BatchSettings(
            batch_size=args.batch_size,
            prefetch=args.prefetch,
            max_wait=args.max_wait,
            checkpoint_interval=args.checkpoint_interval,
            stuck_seconds=args.stuck_seconds,
            release_timeout=args.release_timeout,
            handler_exit_timeout=args.handler_exit_seconds,
        ),
        shutdown_timeout=args.shutdown_timeout,
        crash_marker_dir=Path(args.crash_marker_dir),
        host=args.host,
        port=args.port,
        assignment_file=args.assignment_file,
        ack_file=args.ack_file,
        kubeconfig=args.kubeconfig,
        credentials=settings.credentials_from(
            os.environ,
            policy=settings.endpoint_policy(
                os.environ,
                eventhub_suffixes=args.allowed_eventhub_suffix,
                blob_suffixes=args.allowed_blob_suffix,
                allow_development=args.allow_development_endpoints,
            ),
        ),
    )
    # Spans per batch when the otel extra is installed and OTEL_* names an exporter.
    tracing.start(os.environ)
    try:
        return asyncio.run(launching.run(config))
    finally:
        tracing.stop()


def log_identity(args: argparse.Namespace) -> dict[str, str]:
    """Who this process is, for the fields of JSON log records (`logformats`)."""
    return {
        "consumer": args.consumer or "",
        "pod": args.pod_name or os.environ.get("POD_NAME", ""),
        "namespace": args.namespace or os.environ.get("POD_NAMESPACE", ""),
    }
