"""The consumer's HTTP endpoints: /healthz, /readyz and Prometheus /metrics.

/healthz says the process and its event loop are alive (a loop blocked by a handler that
never yields would miss its heartbeat): only a wedged runtime fails it. /readyz says the pod
applied its current assignment; a partition failing, parked, stuck or lost is reported to
the operator instead (``contracts.partitionreports``), because turning the pod NotReady
would move every partition it owns, and a poison event with them, through the fleet.
/metrics serves the runtime's counters and gauges.
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from eventhub_balancer import errors
from eventhub_balancer.adapters import listening
from eventhub_balancer.consumer import metrics, runtime

logger = logging.getLogger(__name__)

#: The runtime's loop turns every 0.5 s; ten missed turns mean it is blocked.
HEARTBEAT_LIMIT_S: Final = 5.0
#: The flags that move the endpoints, for a refusal to listen.
FLAGS: Final = listening.Flags(
    host="--host", port="--port", host_also="env EHB_HOST", port_also="env EHB_PORT"
)


def application(consumer: runtime.Runtime) -> web.Application:
    registry = metrics.registry_for(
        lambda: consumer.stats,
        triggers=consumer.trigger_stats,
        # Only a ConfigMap source refuses anything (a file or memory source has no `refused`).
        refusals=lambda: getattr(consumer.source, "refused", {}),
    )

    async def healthz(request: web.Request) -> web.Response:
        age = consumer.heartbeat_age()
        if consumer.stopped or age > HEARTBEAT_LIMIT_S:
            return web.Response(status=503, text=f"runtime loop not turning ({age:.1f} s)\n")
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        ready, reason = consumer.ready()
        return web.Response(status=200 if ready else 503, text=reason + "\n")

    async def metrics_page(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
    return app


async def serve(consumer: runtime.Runtime, *, host: str, port: int) -> web.AppRunner:
    """Start serving; the caller cleans the runner up. Port 0 picks a free port."""
    runner = web.AppRunner(application(consumer), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise errors.ConfigurationError(listening.refusal(host, port, e, flags=FLAGS)) from e
    logger.info("serving /healthz /readyz /metrics on %s:%d", host, bound_port(runner))
    return runner


def bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("the endpoint server is not listening")
