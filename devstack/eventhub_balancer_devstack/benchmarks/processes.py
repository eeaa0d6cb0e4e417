"""The operator benchmark's processes: API server, operator and consumer doubles apart.

In one process the benchmark measured itself: profiled at 1,024 partitions over 512 pods, the
local API server took 61 % of the samples, the harness's own polling 15 %, the consumer
double's polling 7 %, the operator 11 %, all behind one GIL. Here each runs as a process of
its own (``python -m eventhub_balancer_devstack.benchmarks.processes ROLE``), so the operator's
CPU time and memory are its own, and nobody polls: the doubles and the harness watch.

Each child prints one JSON line when it is ready, answers ``stats`` on stdin with one JSON
line, and ends when its stdin closes (the parent died or is done): no orphan outlives a run.
Their logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from eventhub_balancer.adapters import eventhubs, kubeapi
from eventhub_balancer.contracts import labelselectors
from eventhub_balancer.handlers import registering, running
from eventhub_balancer_devstack import kubeservers
from eventhub_balancer_devstack.benchmarks import doubles, stagerecords
from eventhub_balancer_devstack.kube import LocalKubeAPI
from eventhub_balancer_devstack.realkube import RealControlPlane

logger = logging.getLogger(__name__)

#: The longest wait for a child to say it is ready, and to end once told.
START_SECONDS = 60.0
STOP_SECONDS = 10.0
#: The watches a forced re-list breaks (those a cycle reads), and for how long their resumes
#: get 410 Gone: long enough for kopf's reconnection to meet it.
RELIST_PLURALS = ("pods", "configmaps")
RELIST_SECONDS = 2.0
#: The calls on the local API's watch faults (`lagging`); a real server has no such switch.
WATCH_FAULT_CALLS = ("inject_watch_fault", "clear_watch_faults", "watch_fault_effects")
#: The children's log level (default WARNING), e.g. EHB_BENCH_LOG=debug to see every cycle.
LOG_LEVEL_ENV = "EHB_BENCH_LOG"


def serve_operator(
    kubeconfig: Path,
    namespaces: Sequence[str],
    stdin: IO[str],
    *,
    refresh_seconds: float = eventhubs.REFRESH_SECONDS,
    hub_timeout: float = eventhubs.TIMEOUT_SECONDS,
    pod_selector: str | None = None,
) -> None:
    """The real operator (kopf, adapters, handlers), as ``ehb operator`` builds it; ``cycles``
    answers its cycle lines since the last asking (`stagerecords.CycleRecords`). A scenario whose
    hub grows re-reads its partitions more often (``refresh_seconds``); ``pod_selector`` is
    ``ehb operator --pod-selector``'s, the only pods it watches."""
    records = stagerecords.CycleRecords().__enter__()
    api = kubeapi.KubeAPI.from_environment(str(kubeconfig))
    scope = (
        labelselectors.parse_query(pod_selector, field="--pod-selector") if pod_selector else None
    )
    runtime = registering.Operator(
        kube=api,
        hubs=eventhubs.EventHubs(refresh_seconds=refresh_seconds, timeout=hub_timeout),
        connection=api.connection_info,
        pod_scope=scope,
    )
    options = running.Options(namespaces=tuple(namespaces), metrics_port=None)
    operator = running.OperatorThread(runtime, options).start(timeout=START_SECONDS)

    def stats() -> dict[str, Any]:
        return {
            "cycles": runtime.cycles_run,
            "requests": api.requests,
            "lists": api.lists,
            # The pods listed afresh every 10 s, and the ConfigMaps every 60 s, beside the
            # cycles (handlers/cache/relisting).
            "relistings": runtime.cache.relisting.listings,
            # Per watched kind, the re-lists kopf's watches made (a 410, a restart).
            "relists": dict(runtime.cache.watch.relists),
            "writes": sum(api.writes.values()),
            # The Events the cycles handed over and the poster has not posted yet.
            "events_pending": runtime.events.pending,
            "cpu_s": time.process_time(),
            "rss_mb": _rss_mb(),
            "peak_rss_mb": _peak_rss_mb(),
        }

    def cycles() -> dict[str, Any]:
        return {"cycles": [dataclasses.asdict(c) for c in records.take()]}

    try:
        _answer(stdin, stats, commands={"cycles": cycles})
    finally:
        operator.stop(timeout=STOP_SECONDS)
        api.close()
        records.__exit__()


def serve_apiserver(kubeconfig: Path, stdin: IO[str], *, kind: kubeservers.Kind = "local") -> None:
    """The local API (or, with ``kind="real"``, the real control plane) until stdin closes."""
    kube = kubeservers.server(kind)
    kube.start()
    try:
        _serve_apiserver(kube, kubeconfig, stdin)
    finally:
        kube.stop()


def _serve_apiserver(kube: kubeservers.KubeServer, kubeconfig: Path, stdin: IO[str]) -> None:
    kube.write_kubeconfig(kubeconfig)

    def record() -> dict[str, Any]:
        """Keep the Pod and ConfigMap writes from now on (not the set-up's: at a thousand
        consumers they would be tens of thousands)."""
        kube.record_writes("v1/pods", "v1/configmaps")
        return {"recording": ["pods", "configmaps"]}

    def writes() -> dict[str, Any]:
        """The Pod and ConfigMap writes committed since the last asking, with their commit
        times: what `stages` reads of the API server."""
        taken = kube.take_writes()
        return {
            "dropped": taken.dropped,
            "writes": [[e.type, e.body, e.previous, e.committed_at] for e in taken.events],
        }

    def relist() -> dict[str, Any]:
        """Every pod and ConfigMap watch ends, and its resume gets 410 Gone: the
        operator's kopf lists both kinds again, as after a real API server's compaction.
        On the real control plane, kube-apiserver restarts (a rollout): its new watch
        cache answers the resumes 410 Gone itself."""
        if isinstance(kube, RealControlPlane):
            kube.restart_apiserver()
            return {"relist": ["*"]}
        assert isinstance(kube, LocalKubeAPI)
        for plural in RELIST_PLURALS:
            kube.inject_watch_fault(
                "close", seconds=RELIST_SECONDS, plural=plural, close_after_s=0.5
            )
            kube.inject_watch_fault("gone", seconds=RELIST_SECONDS, plural=plural)
        return {"relist": list(RELIST_PLURALS)}

    def direct(request: Mapping[str, Any]) -> dict[str, Any]:
        """The store calls a harness makes of an API server in its own process
        (`apartservers.ApiServerApart`), and the local API's watch faults (`lagging`)."""
        call, args = str(request.get("call")), dict(request.get("args") or {})
        if call == "create_object":
            return {"result": kube.create_object(args.pop("resource"), args.pop("body"), **args)}
        if call == "get_object":
            return {"result": kube.get_object(args.pop("resource"), args.pop("name"), **args)}
        if call == "list_objects":
            return {"result": kube.list_objects(args.pop("resource"), **args)}
        if call == "record_writes":
            kube.record_writes(*args["resources"])
            return {"result": None}
        if call in WATCH_FAULT_CALLS:
            if not isinstance(kube, LocalKubeAPI):
                raise ValueError(f"{call}: watch faults exist only on the local API")
            return {"result": _watch_fault_call(kube, call, args)}
        return {"error": f"unknown call {call!r}"}

    _answer(
        stdin,
        lambda: {"url": kube.url},
        commands={"relist": relist, "record": record, "writes": writes},
        requests=direct,
    )


def _watch_fault_call(kube: LocalKubeAPI, call: str, args: dict[str, Any]) -> Any:
    """One of `WATCH_FAULT_CALLS` on the local API: begin a fault (``args``: its kind and
    `LocalKubeAPI.inject_watch_fault`'s keywords), end them all, or say what they did."""
    if call == "inject_watch_fault":
        kube.inject_watch_fault(args.pop("kind"), **args)
        return None
    if call == "clear_watch_faults":
        kube.clear_watch_faults()
        return None
    return kube.watch_fault_effects()


def _rss_mb() -> float:
    """The resident memory now (not the peak): /proc/self/statm's second field, in pages."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _peak_rss_mb() -> float:
    """The most resident memory the process has had (its high-water mark): /proc/self/status's
    VmHWM, in kB."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return round(int(line.split()[1]) / 1024, 1)


def _answer(
    stdin: IO[str],
    stats: Callable[[], dict[str, Any]],
    *,
    commands: Mapping[str, Callable[[], dict[str, Any]]] | None = None,
    requests: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
) -> None:
    """Say ready, then answer each ``stats`` line (or one of ``commands``, or a JSON object
    for ``requests``) until stdin closes; an unknown line, or a request that raised, gets an
    error, so the benchmark never waits for nothing."""
    print(json.dumps({"ready": True, **stats()}), flush=True)
    for line in stdin:
        word = line.strip()
        if requests is not None and word.startswith("{"):
            try:
                answer = requests(json.loads(word))
            except Exception as e:  # told to the caller, which raises it there
                answer = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(answer), flush=True)
        elif word == "stats":
            print(json.dumps(stats()), flush=True)
        elif commands is not None and word in commands:
            print(json.dumps(commands[word]()), flush=True)
        else:
            print(json.dumps({"error": f"unknown command {word!r}"}), flush=True)


class Child:
    """One of the processes above, seen from the benchmark."""

    def __init__(self, role: str, *args: str) -> None:
        self.role = role
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, role, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ready = self._line(START_SECONDS)

    def _line(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        result: list[str] = []
        reader = threading.Thread(
            target=lambda: result.append(self.process.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(timeout)
        if not result or not result[0]:
            self.stop()
            raise TimeoutError(f"the {self.role} process did not answer within {timeout} s")
        answer: dict[str, Any] = json.loads(result[0])
        return answer

    def stats(self) -> dict[str, Any]:
        return self.ask("stats")

    def ask(self, command: str, *, timeout: float = STOP_SECONDS) -> dict[str, Any]:
        """One command line, and the process's one-line answer within ``timeout``."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        answer = self._line(timeout)
        if "error" in answer:
            raise RuntimeError(f"the {self.role} process: {answer['error']}")
        return answer

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        # The real control plane's processes take up to their own stop bound to end.
        bound = STOP_SECONDS * 3 if self.role == "apiserver" else STOP_SECONDS
        try:
            self.process.wait(bound)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_SECONDS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=__name__)
    parser.add_argument("role", choices=("apiserver", "operator", "doubles"))
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", action="append", default=[])
    parser.add_argument("--refresh-seconds", type=float, default=eventhubs.REFRESH_SECONDS)
    parser.add_argument("--hub-timeout", type=float, default=eventhubs.TIMEOUT_SECONDS)
    parser.add_argument("--kube", choices=kubeservers.KINDS, default="local")
    parser.add_argument("--pod-selector")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get(LOG_LEVEL_ENV, "WARNING").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s: %(message)s",
    )
    if args.role == "apiserver":
        serve_apiserver(args.kubeconfig, sys.stdin, kind=args.kube)
    elif args.role == "operator":
        serve_operator(
            args.kubeconfig,
            args.namespace,
            sys.stdin,
            refresh_seconds=args.refresh_seconds,
            hub_timeout=args.hub_timeout,
            pod_selector=args.pod_selector,
        )
    else:
        doubles.serve(args.kubeconfig, args.namespace[0], sys.stdin, answer=_answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
