"""Running the operator: kopf, the growth watch, and /metrics and /healthz on one port.

``ehb operator`` calls `serve` on the main thread; tests and benchmarks use `OperatorThread`
to run a whole operator (its own event loop, its own registry) in the background and stop it
cleanly, as a second replica or after a simulated crash. Beside kopf, `serve` runs the
operator's growth watch (`growth.Watch`: it wakes the consumers whose hub grew) and stops it
before the Event Hubs clients its listings use are closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import ssl
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

import kopf
from aiohttp import web
from kopf._cogs.clients import errors as kopf_errors

from eventhub_balancer import errors, runners
from eventhub_balancer.adapters import listening
from eventhub_balancer.handlers import (
    growth,
    kopfkeepalives,
    kopfrefusals,
    kopfrescans,
    kopfretrylogs,
    kopfteardown,
    kopftoggles,
    kopfwatches,
    kopfwiring,
    registering,
)

logger = logging.getLogger(__name__)

#: The flags that move the metrics endpoint, for a refusal to listen.
METRICS_FLAGS = listening.Flags(
    host="--metrics-host", port="--metrics-port", port_also="the chart's value `port`"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    namespaces: Collection[str] = ()
    clusterwide: bool = False
    standalone: bool = True
    peering_name: str | None = None
    priority: int = 0
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = 8080  # None: no endpoint; 0: any free port
    #: aiohttp middlewares in front of the endpoint (``ehb operator``: who may read /metrics)
    metrics_middlewares: Sequence[Any] = ()
    #: TLS for the endpoint; None: plain HTTP
    metrics_tls: ssl.SSLContext | None = None


async def _start_http(
    runtime: registering.Operator, ready: asyncio.Event, options: Options, *, port: int
) -> tuple[web.AppRunner, int]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=runtime.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def healthz(_: web.Request) -> web.Response:
        stuck = runtime.stuck(now=time.monotonic())
        body = {
            "ready": ready.is_set(),
            "consumers": len(runtime.consumers),
            "cycles": runtime.cycles_run,
            "stuck": [f"{ns}/{name}" for ns, name in stuck],
        }
        status = 200 if ready.is_set() and not stuck else 503
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")

    app = web.Application(middlewares=list(options.metrics_middlewares))
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, options.metrics_host, port, ssl_context=options.metrics_tls)
    try:
        await site.start()
    except OSError as e:
        # Another process holds the port (the usual case: a second operator on one machine),
        # it is privileged, or the address is not this machine's: one line naming the flag.
        await runner.cleanup()
        raise errors.ConfigurationError(
            listening.refusal(options.metrics_host, port, e, flags=METRICS_FLAGS)
        ) from None
    sockets = getattr(site._server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)


async def serve(
    runtime: registering.Operator,
    options: Options,
    *,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: threading.Event | None = None,
    bound_port: list[int] | None = None,
) -> None:
    kopftoggles.install()
    kopfkeepalives.install()
    kopfretrylogs.install()
    kopfrefusals.install()
    kopfwatches.install()
    kopfteardown.install()
    kopfrescans.install()
    settings = kopf.OperatorSettings()
    kopfwiring.configure(
        settings,
        peering_name=options.peering_name,
        standalone=options.standalone,
        clusterwide=options.clusterwide,
        priority=options.priority,
        pod_scope=runtime.pod_scope,
        namespaces=options.namespaces,
    )
    registry = kopfwiring.build_registry(runtime)
    scope = runtime.pod_scope.to_query() if runtime.pod_scope is not None else ""
    logger.info(
        "namespaces served: %s",
        "every namespace" if options.clusterwide else ", ".join(options.namespaces),
    )
    logger.info(
        "pods watched: %s",
        f"those matching {scope}"
        if scope
        else "every pod of the namespaces served (--pod-selector narrows it to your consumers')",
    )
    kopf_ready = asyncio.Event()
    runner: web.AppRunner | None = None
    if options.metrics_port is not None:
        runner, port = await _start_http(runtime, kopf_ready, options, port=options.metrics_port)
        if bound_port is not None:
            bound_port.append(port)
        logger.info(
            "metrics and liveness on %s://%s:%d (/metrics, /healthz)",
            "https" if options.metrics_tls is not None else "http",
            options.metrics_host,
            port,
        )

    async def watch_ready() -> None:
        await kopf_ready.wait()
        if ready_flag is not None:
            ready_flag.set()

    watcher = asyncio.ensure_future(watch_ready())
    # Partitions added to a hub are seen within a quarter second (`growth`), not at the refresh.
    growing = growth.Watch(runtime.hubs, wake=runtime.wake)
    growing.start()
    try:
        # A watch kopf gave up on, but for an outage it is watched again
        # (`kopfwatches`), ends kopf in a stop that `kopfrefusals.run` bounds.
        await kopfrefusals.run(
            kopf.operator(
                registry=registry,
                settings=settings,
                clusterwide=options.clusterwide,
                namespaces=list(options.namespaces),
                standalone=options.standalone,
                peering_name=options.peering_name,
                priority=options.priority,
                stop_flag=stop_flag,
                ready_flag=kopf_ready,
            )
        )
    except kopf_errors.APIForbiddenError as e:  # a watch kopf gave up on: one line (`ehb`)
        backoffs = settings.networking.error_backoffs
        retried = backoffs if isinstance(backoffs, float | int) else sum(backoffs)
        raise kopfrefusals.refused(e, retried_seconds=retried) from e
    except kopf_errors.APINotFoundError as e:  # a CRD deleted while kopf watched it
        raise kopfrefusals.gone(e) from e
    finally:
        watcher.cancel()
        await growing.stop()  # before the clients its listings go through are closed
        await runtime.events.stop()  # what the last cycles handed over, within its limit
        await runtime.hubs.close()
        if runner is not None:
            await runner.cleanup()
        # kopf never shuts down its executor: its idle threads would pass for API requests
        # still in flight when the process exits (`operator_cmd.leave_requests_behind`).
        settings.execution.executor.shutdown(wait=False)


#: kopf's logger that says it cannot take OS signals outside the main thread, and its words.
KOPF_REACTOR_LOGGER = "kopf._core.reactor.running"
THREAD_SIGNALS = "OS signals are ignored: running not in the main thread."


def _not_thread_signals(record: logging.LogRecord) -> bool:
    """An `OperatorThread` stops kopf by its stop flag, never by a signal, so kopf's warning
    that it takes none in a thread is no news: ``ehb demo``'s log showed it in every run."""
    return record.getMessage() != THREAD_SIGNALS


class OperatorThread:
    """A whole operator in a background thread with its own loop (tests, benchmarks, the
    demo)."""

    def __init__(self, runtime: registering.Operator, options: Options) -> None:
        logging.getLogger(KOPF_REACTOR_LOGGER).addFilter(_not_thread_signals)  # kept once
        self.runtime = runtime
        self.options = options
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._ports: list[int] = []
        self._loop = runners.BackgroundLoop(name="ehb-operator")
        self._serving: concurrent.futures.Future[None] | None = None
        self.error: BaseException | None = None

    @property
    def metrics_port(self) -> int | None:
        return self._ports[0] if self._ports else None

    def _finished(self, serving: concurrent.futures.Future[None]) -> None:
        error = None if serving.cancelled() else serving.exception()
        if error is not None:  # reported by start()/stop(), never swallowed silently
            self.error = error
            logger.error("operator thread failed", exc_info=error)
            self._ready.set()

    def start(self, *, timeout: float = 20.0) -> OperatorThread:
        self._loop.start(timeout=timeout)
        self._serving = self._loop.submit(
            serve(
                self.runtime,
                self.options,
                stop_flag=self._stop,
                ready_flag=self._ready,
                bound_port=self._ports,
            )
        )
        self._serving.add_done_callback(self._finished)
        if not self._ready.wait(timeout):
            self.stop()
            raise TimeoutError(f"the operator was not ready within {timeout} s")
        if self.error is not None:
            self.stop()  # the loop outlives the failed operator: end its thread too
            raise RuntimeError("the operator failed to start") from self.error
        return self

    def stop(self, *, timeout: float = 20.0) -> None:
        self._stop.set()
        if self._serving is not None:
            concurrent.futures.wait([self._serving], timeout=timeout)
        try:
            self._loop.stop(timeout=timeout)
        except TimeoutError:
            logger.warning("the operator thread did not stop within %.0f s", timeout)
