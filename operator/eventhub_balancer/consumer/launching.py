"""Running a consumer pod: handler, SparkSession, assignment source, endpoints, signals.

``ehb consume`` and the Python API (:func:`run`) both end here. The order matters: the
handler is imported first (a typo fails fast, before any connection), the SparkSession is
started before the first assignment is applied (a 5 s start would otherwise stall the first
batches), and SIGTERM turns into a graceful release of every partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from eventhub_balancer.adapters import podconfig
from eventhub_balancer.consumer import (
    assignments,
    connections,
    endpoints,
    processing,
    runtime,
    settings,
)

logger = logging.getLogger(__name__)


def build_processor(config: settings.ConsumerSettings) -> tuple[processing.BatchProcessor, Any]:
    """The user's handler as a processor, and the SparkSession in Spark mode (else None)."""
    function = processing.load_handler(config.handler, search_path=config.handler_path)
    if not config.spark:
        return processing.traced(processing.PlainProcessor(function)), None
    from eventhub_balancer.spark import sessions

    session = sessions.build_session(
        master=config.spark_master or sessions.DEFAULT_MASTER,
        app_name=f"ehb-{config.consumer}-{config.pod}",
        conf=config.spark_conf,
    )
    return processing.traced(processing.SparkProcessor(function, session=session)), session


def build_source(config: settings.ConsumerSettings) -> assignments.AssignmentSource:
    if config.assignment_file is not None:
        return assignments.FileSource(config.assignment_file, ack_path=config.ack_file)
    client = podconfig.PodConfigMaps(
        namespace=config.namespace,
        consumer=config.consumer,
        pod=config.pod,
        kubeconfig=config.kubeconfig,
    )
    return assignments.ConfigMapSource(client)


async def run(config: settings.ConsumerSettings) -> int:
    """Consume until SIGTERM/SIGINT (then release everything) or until the source ends."""
    processor, session = build_processor(config)
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
        spark=session,
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, consumer.request_shutdown)
    server = await endpoints.serve(consumer, host=config.host, port=config.port)
    try:
        await consumer.run()
    finally:
        await server.cleanup()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if session is not None:
            with contextlib.suppress(Exception):
                session.stop()
    logger.info("consumer %s stopped", config.pod)
    return 0
