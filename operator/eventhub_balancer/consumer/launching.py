"""Running a consumer pod: handler, SparkSession, assignment source, endpoints, signals.

``ehb consume`` and the Python API (:func:`run`) both end here. The handler is imported and its
signature checked first (a mistake fails fast, before any connection). In Spark mode the
SparkSession starts and warms up in a thread beside the runtime, and the pod is NotReady
until it is warm: the operator gives it partitions only then (`sessionkeeping`), and again
while a lost session is replaced. A session that cannot start ends the pod with the reason,
after a release of its partitions.
SIGTERM turns into a graceful release of every partition.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
from typing import Any

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import (
    assignmentfiles,
    assignments,
    connections,
    crashmarkers,
    endpoints,
    metrics,
    processing,
    protocols,
    runtime,
    sessionkeeping,
    settings,
    triggers,
)

logger = logging.getLogger(__name__)


def build_processor(
    config: settings.ConsumerSettings,
    executor: concurrent.futures.Executor,
    trigger_stats: metrics.TriggerStats,
) -> tuple[processing.BatchProcessor, sessionkeeping.SessionKeeper | None]:
    """The user's handler as a processor, and in Spark mode the session it waits for."""
    function = protocols.load(config.handler, search_path=config.handler_path, spark=config.spark)
    if not config.spark:
        return processing.traced(processing.PlainProcessor(function, executor=executor)), None
    from eventhub_balancer.spark import frames, sessions

    def build() -> Any:
        session = sessions.build_session(
            master=config.spark_master or sessions.DEFAULT_MASTER,
            remote=config.spark_remote,
            app_name=f"ehb-{config.consumer}-{config.pod}",
            conf=config.spark_conf,
        )
        frames.warm_up(session)
        return session

    async def alive(session: Any) -> bool:
        return await asyncio.to_thread(sessions.is_alive, session)

    async def discard(session: Any) -> None:
        await asyncio.to_thread(sessions.discard, session)

    keeper = sessionkeeping.SessionKeeper(
        lambda: asyncio.to_thread(build), alive=alive, discard=discard
    )
    processor = triggers.SparkTriggers(
        function,
        session=keeper.get,
        consumer=config.consumer,
        pod=config.pod,
        settings=config.trigger,
        executor=executor,
        stats=trigger_stats,
        session_lost=keeper.lost,
    )
    return processing.traced(processor), keeper


def build_source(config: settings.ConsumerSettings) -> assignments.AssignmentSource:
    if config.assignment_file is not None:
        assignmentfiles.check(config.assignment_file, ack_path=config.ack_file)
        return assignmentfiles.FileSource(config.assignment_file, ack_path=config.ack_file)
    client = podconfig.PodConfigMaps(
        namespace=config.namespace,
        consumer=config.consumer,
        pod=config.pod,
        pod_uid=config.credentials.pod_uid,
        kubeconfig=config.kubeconfig,
    )
    return assignments.ConfigMapSource(client)


async def run(config: settings.ConsumerSettings) -> int:
    """Consume until SIGTERM/SIGINT (then release everything) or until the source ends."""
    executor = processing.handler_threads(config.handler_concurrency)
    trigger_stats = metrics.TriggerStats()
    processor, session = build_processor(config, executor, trigger_stats)
    consumer = runtime.Runtime(
        settings=runtime.RuntimeSettings(
            consumer=config.consumer,
            pod=config.pod,
            batch=config.batch,
            shutdown_timeout=config.shutdown_timeout,
        ),
        source=build_source(config),
        backends=connections.AzureBackends(
            credentials=config.credentials, owner_id=config.pod, batch=config.batch
        ),
        processor=processor,
        trigger_stats=trigger_stats if config.spark else None,
        readiness=None if session is None else session.ready,
        crash_markers=crashmarkers.CrashMarkers(
            config.crash_marker_dir, pod=config.pod, pod_uid=config.credentials.pod_uid
        ),
        secret_files=config.credentials.files,
    )
    # Listen first: a taken port stops the pod before a Spark session or a signal handler
    # is started that would have to be undone.
    server = await endpoints.serve(consumer, host=config.host, port=config.port)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, consumer.request_shutdown)
    if session is not None:
        # A session that cannot start (first or again) stops the pod, its partitions released.
        session.on_failed = lambda _: consumer.request_shutdown()
        session.start()
    try:
        await consumer.run()
    finally:
        await server.cleanup()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if session is not None:
            await session.stop(lambda s: asyncio.to_thread(s.stop))
        executor.shutdown(wait=False, cancel_futures=True)
    failed = None if session is None else session.task
    if failed is not None and failed.done() and not failed.cancelled() and failed.exception():
        raise failed.exception()  # type: ignore[misc]
    logger.info("consumer %s stopped", config.pod)
    return 0
