"""Running a consumer pod: handler, SparkSession, assignment source, endpoints, signals.

``ehb consume`` and the Python API (:func:`run`) both end here. The handler is imported and its
signature checked first (a mistake fails fast, before any connection). In Spark mode the
SparkSession starts in a thread beside the runtime: the receivers open and fill at once, and
the first trigger waits for the session, instead of the whole pod waiting seconds for the JVM
before it reads a single event.
A session that cannot start ends the pod with the reason, after a release of its partitions.
SIGTERM turns into a graceful release of every partition.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import (
    assignments,
    connections,
    endpoints,
    metrics,
    processing,
    protocols,
    runtime,
    settings,
    triggers,
)

logger = logging.getLogger(__name__)


class SessionStart:
    """The SparkSession, built in a thread; `get` waits for it (and raises why it failed)."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build
        self.task: asyncio.Task[Any] | None = None

    def start(self) -> asyncio.Task[Any]:
        if self.task is None:
            self.task = asyncio.create_task(asyncio.to_thread(self.build), name="spark-session")
        return self.task

    async def get(self) -> Any:
        return await asyncio.shield(self.start())

    async def stop(self) -> None:
        """Stop the session once it has started (a start in flight is waited for)."""
        if self.task is None:
            return
        with contextlib.suppress(Exception):
            session = await self.task
            await asyncio.to_thread(session.stop)


def build_processor(
    config: settings.ConsumerSettings,
    executor: concurrent.futures.Executor,
    trigger_stats: metrics.TriggerStats,
) -> tuple[processing.BatchProcessor, SessionStart | None]:
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

    start = SessionStart(build)
    processor = triggers.SparkTriggers(
        function,
        session=start.get,
        consumer=config.consumer,
        pod=config.pod,
        settings=config.trigger,
        executor=executor,
        stats=trigger_stats,
    )
    return processing.traced(processor), start


def build_source(config: settings.ConsumerSettings) -> assignments.AssignmentSource:
    if config.assignment_file is not None:
        return assignments.FileSource(config.assignment_file, ack_path=config.ack_file)
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
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, consumer.request_shutdown)
    starting = None if session is None else session.start()
    if starting is not None:
        starting.add_done_callback(lambda task: _session_started(task, consumer))
    server = await endpoints.serve(consumer, host=config.host, port=config.port)
    try:
        await consumer.run()
    finally:
        await server.cleanup()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if session is not None:
            await session.stop()
        executor.shutdown(wait=False, cancel_futures=True)
    if starting is not None and not starting.cancelled() and starting.exception() is not None:
        raise starting.exception()  # type: ignore[misc]
    logger.info("consumer %s stopped", config.pod)
    return 0


def _session_started(task: asyncio.Task[Any], consumer: runtime.Runtime) -> None:
    """A session that cannot start stops the pod (its partitions are released first)."""
    if task.cancelled() or task.exception() is None:
        logger.info("the SparkSession is ready")
        return
    logger.error("the SparkSession did not start: %s", task.exception())
    consumer.request_shutdown()
