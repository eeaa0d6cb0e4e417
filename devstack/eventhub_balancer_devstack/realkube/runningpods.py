"""One pod that the local node runs as a process: its readiness probe and its restarts.

`LocalNode` (in ``nodes.py``) binds pods, starts their processes and deletes them; what
happens to a pod while it runs is here, one `check` per probe round: a failed readiness probe
counted against a kubelet's failureThreshold, a crashed process restarted with back-off (as
restartPolicy Always does), and each change written as the pod's status (``podstatuses.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eventhub_balancer_devstack import podprocesses
from eventhub_balancer_devstack.realkube import nodeleases, podstatuses, resourcecalls

logger = logging.getLogger(__name__)

#: A readiness probe slower than this counts as a failure (a kubelet's timeoutSeconds).
PROBE_TIMEOUT_S = 3.0

#: Failed probes in a row before a Ready pod turns NotReady (a kubelet's failureThreshold).
FAILURE_THRESHOLD = 3

#: The longest a crashed container waits before its restart (a kubelet's back-off caps at
#: 5 minutes; a local stack wants a crash looped quickly, but never in a tight loop).
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)

#: What a kubelet keeps of a failed container's log as its termination message under
#: ``terminationMessagePolicy: FallbackToLogsOnError``: its last lines, within these bytes.
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048


@dataclasses.dataclass
class RunningPod:
    """What the node knows of one pod it runs: its process, readiness, restarts, deletion."""

    namespace: str
    name: str
    uid: str
    container: str
    image: str
    port: int
    template: podprocesses.PodTemplate
    process: subprocess.Popen[bytes]
    started_at: str
    #: The pod's spec, as bound (`secretvolumes` reads its Secret volumes from it)
    spec: Mapping[str, Any]
    ready: bool = False
    failures: int = 0
    restarts: int = 0
    next_restart: float = 0.0
    deleting: bool = False
    gone: bool = False
    #: When Ready last changed (its first start until then): a kubelet keeps a condition's
    #: lastTransitionTime while its status stays, and the operator counts grace from it
    ready_since: str = ""
    #: How the container last ended (a kubelet's ``lastState.terminated``); None: it has not
    last_exit: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.ready_since = self.ready_since or self.started_at


def _probe(pod: RunningPod) -> bool:
    if pod.process.poll() is not None:
        return False
    return podprocesses.probe(pod.template, pod.port, timeout=PROBE_TIMEOUT_S)


def check(calls: resourcecalls.ResourceCalls, pod: RunningPod) -> None:
    """One probe round: restart a dead process when its back-off is over, else probe it, and
    write the status when Ready or the process changed."""
    if (code := pod.process.poll()) is not None:
        now = time.monotonic()
        if pod.next_restart == 0.0:  # its end, seen first: said as a kubelet says it
            pod.last_exit = exited(code, started_at=pod.started_at, log=_fallback_log(pod))
        if pod.ready:
            pod.ready = False
            pod.ready_since = nodeleases.now()
            pod.failures = FAILURE_THRESHOLD
            write_status(calls, pod)
        if pod.next_restart == 0.0:
            delay = RESTART_BACKOFF_S[min(pod.restarts, len(RESTART_BACKOFF_S) - 1)]
            pod.next_restart = now + delay
        if now >= pod.next_restart and not pod.deleting:
            pod.restarts += 1
            pod.next_restart = 0.0
            pod.process = podprocesses.spawn(
                pod.template, name=pod.name, namespace=pod.namespace, uid=pod.uid, port=pod.port
            )
            pod.started_at = nodeleases.now()
            logger.info("pod %s restarted (%d) as pid %d", pod.name, pod.restarts, pod.process.pid)
            write_status(calls, pod)
        return
    ready = _probe(pod) and not pod.deleting
    if ready:
        pod.failures = 0
    elif pod.ready:
        pod.failures += 1
        if pod.failures < FAILURE_THRESHOLD:
            return
    if ready != pod.ready:
        pod.ready = ready
        pod.ready_since = nodeleases.now()
        write_status(calls, pod)


def exited(code: int, *, started_at: str, log: Path | None = None) -> dict[str, Any]:
    """A container's ``terminated`` state from its process's return code: a signal's is
    128 + its number (SIGKILL: 137), as a container runtime reports it; on a failure, the
    tail of ``log`` as its ``message`` (the node writes no termination-log file)."""
    exit_code = 128 - code if code < 0 else code
    ended = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started_at,
        "finishedAt": nodeleases.now(),
    }
    if exit_code != 0 and log is not None and (tail := _tail(log)):
        ended["message"] = tail
    return ended


def _fallback_log(pod: RunningPod) -> Path | None:
    """The pod's log when its container asks for its tail as its termination message."""
    containers = pod.spec.get("containers") or [{}]
    if containers[0].get("terminationMessagePolicy") != "FallbackToLogsOnError":
        return None
    return None if pod.template.log_dir is None else pod.template.log_dir / f"{pod.name}.log"


def _tail(log: Path) -> str:
    """The last `FALLBACK_LINES` of ``log`` within its last `FALLBACK_BYTES`."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - FALLBACK_BYTES))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-FALLBACK_LINES:])


def write_status(calls: resourcecalls.ResourceCalls, pod: RunningPod) -> None:
    podstatuses.patch(
        calls,
        pod.namespace,
        pod.name,
        podstatuses.running(
            container=pod.container,
            image=pod.image,
            started_at=pod.started_at,
            alive=pod.process.poll() is None,
            ready=pod.ready,
            restarts=pod.restarts,
            ready_since=pod.ready_since,
            last_exit=pod.last_exit,
        ),
    )
