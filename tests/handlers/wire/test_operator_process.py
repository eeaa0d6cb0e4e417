"""``ehb -v operator`` as a process, as the chart runs it: how it stops, what it logs, and how
soon a standby replica acts when the one at work is killed.

The operator runs as the command does (its own process, its own signal handling and logging),
against the local API server and the Event Hubs emulator. Kubernetes kills a pod that has not
exited 30 s after its SIGTERM (``terminationGracePeriodSeconds``), and a standalone operator is
replaced with the ``Recreate`` strategy: each second the old one lingers, no consumer is
balanced.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.fixtures.operator import Stack, wait_for

#: The daemons' cycles in flight get 5 s (`kopfwiring.CYCLE_FINISH_SECONDS`); the rest of the
#: stop takes a second or two. Well inside Kubernetes' 30 s.
EXIT_BOUND_SECONDS = 12.0


@contextlib.contextmanager
def operator_process(
    stack: Stack, namespace: str, log_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``ehb -v operator -n NAMESPACE`` (the chart's ``logVerbosity: 1``), its output in
    ``log_path``, balancing two pods of consumer ``orders``; killed at the end."""
    stack.secret(namespace)
    stack.consumer(namespace)
    for i in range(2):
        stack.pod(namespace, f"c-{i}")
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eventhub_balancer",
                "-v",
                "operator",
                "-n",
                namespace,
                "--kubeconfig",
                str(stack.kubeconfig),
                "--metrics-insecure",
                "--metrics-host",
                "127.0.0.1",
                "--metrics-port",
                "0",
                "--allow-development-endpoints",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: (
                sorted(stack.counts(namespace).values()) == [16, 16] and stack.balanced(namespace)
            ),
            timeout=60,
            what="balanced by the operator process",
        )
        yield process
    finally:
        process.kill()
        process.wait(timeout=60)


def sigterm_behind_a_hung_api_server(
    stack: Stack, process: subprocess.Popen[bytes]
) -> tuple[int | None, float]:
    """Pause the API server, wait until a pods LIST is in flight, unanswered (they are
    listed afresh every 10 s), SIGTERM the operator: its exit code (None: still running at
    `EXIT_BOUND_SECONDS`) and how long after the signal it ended."""
    stack.kube.pause()
    try:
        time.sleep(11.0)
        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            code: int | None = process.wait(timeout=EXIT_BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - stopping
    finally:
        stack.kube.resume()
    print(f"exited with {code} {took:.1f} s after SIGTERM")
    return code, took


def test_sigterm_while_the_api_server_hangs_exits_within_the_bound(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """A control plane that stops answering (an upgrade, a partition) while the operator is
    rolled: the requests in flight wait out their timeouts, which the client retries (four
    attempts of 15 s). The operator stopped 58 s after its SIGTERM, all of it waiting for
    answers nobody would read."""
    stack, log_path = operator_stack, tmp_path / "operator.log"
    with operator_process(stack, namespace, log_path) as process:
        code, took = sigterm_behind_a_hung_api_server(stack, process)
    output = log_path.read_text()
    assert code == 0, f"still running {took:.1f} s after SIGTERM:\n{output[-3000:]}"
    assert took < EXIT_BOUND_SECONDS
    assert "requests still in flight" in output


def test_sigterm_with_an_event_unposted_and_the_api_server_hanging_exits_within_the_bound(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """The same outage, begun while the operator's Events were being posted (CI met it): the
    Events got their own 5 s after the daemons' 6 s, and the operator outlived the bound. The
    Events' limit counts from the SIGTERM, as the daemons' does."""
    stack, log_path = operator_stack, tmp_path / "operator.log"
    stack.kube.hold("/events")  # the first cycle's Events wait; its ConfigMaps are written
    with operator_process(stack, namespace, log_path) as process:
        code, took = sigterm_behind_a_hung_api_server(stack, process)
    output = log_path.read_text()
    assert code == 0, f"still running {took:.1f} s after SIGTERM:\n{output[-3000:]}"
    assert took < EXIT_BOUND_SECONDS
    assert "Kubernetes Events were not posted" in output


def test_ctrl_c_with_the_api_server_answering_says_nothing_of_requests_in_flight(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """Ctrl-C on an operator whose API server answers every request. kopf's executor for
    synchronous handlers kept an idle thread, which the exit took for a request in flight:
    every stop waited a second more and warned that the API server did not answer."""
    stack, log_path = operator_stack, tmp_path / "operator.log"
    with operator_process(stack, namespace, log_path) as process:
        stopping = time.monotonic()
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=EXIT_BOUND_SECONDS)
        took = time.monotonic() - stopping
    output = log_path.read_text()
    print(f"exited with {code} {took:.1f} s after SIGINT")
    assert code == 0, output[-3000:]
    assert "still in flight" not in output, output[-3000:]
    assert "does not answer" not in output, output[-3000:]


def test_watch_events_write_no_line_at_info(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """The operator watches every pod of the namespaces it serves (cluster-wide, with the
    chart's defaults), and kopf logged each watch handler's success at INFO: one line per
    event, ``Handler 'build_registry.<locals>.pod_changed' succeeded.``, for pods of other
    workloads too, so that what the operator did drowned in what it was told. What it does
    is still logged: a pod's partitions moving, one line for those that go the same way."""
    stack, log_path = operator_stack, tmp_path / "operator.log"
    with operator_process(stack, namespace, log_path):
        before = len(log_path.read_text().splitlines())
        for i in range(20):  # another workload's pods, which the operator watches and ignores
            stack.pod(namespace, f"web-{i}", app="web")
        stack.delete_pod(namespace, "c-1")
        wait_for(lambda: stack.counts(namespace) == {"c-0": 32}, what="c-1's partitions moved")
        time.sleep(1.0)  # the watch events of the last writes
        lines = log_path.read_text().splitlines()[before:]
    print("\n".join(lines[:40]))
    told = [line for line in lines if " kopf.objects: " in line and "succeeded" in line]
    assert told == [], f"{len(told)} lines of watch events, e.g. {told[:3]}"
    # One line for the 16 partitions that moved (as their Event tells it), not one each.
    moved = [line for line in lines if "of c-1 (" in line and "for c-0" in line]
    assert len(moved) == 1, moved
    assert "Took over partitions 16-31 of c-1 (gone) for c-0" in moved[0], moved[0]
    assert not any("c-1 -> c-0" in line for line in lines)


def test_a_start_logs_what_the_operator_did_in_a_few_lines(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """A start over a consumer of 32 partitions and two pods: one line per pod for what it
    was given (not one per partition), and nothing of the conflict every consumer's first
    status write meets with kopf's own patch of the CR, which is retried at once."""
    log_path = tmp_path / "operator.log"
    with operator_process(operator_stack, namespace, log_path):
        time.sleep(1.0)
    lines = log_path.read_text().splitlines()
    print("\n".join(lines))
    assigned = [line for line in lines if "Assigned partitions" in line]
    assert len(assigned) == 2, assigned
    assert not [line for line in lines if "conflict" in line.lower()]
    assert len(lines) < 20


#: From the SIGKILL of the replica at work to its standby's first cycle: the standby waits for
#: the dead replica's peering entry to expire (`kopfwiring.PEERING_LIFETIME_SECONDS`, 15 s
#: at most after its last keep-alive), then starts its daemons and decides.
TAKEOVER_BOUND_SECONDS = 25.0


def test_a_standby_replica_takes_over_soon_after_the_active_one_is_killed(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """Two replicas with peering, and the one at work is killed with no chance to say so (an
    OOM kill, a node lost): its peering entry stays. The standby stayed paused until that
    entry expired, kopf's default 60 s after the dead replica's last keep-alive: a pod that
    died meanwhile kept its partitions, unprocessed, for 52 s."""
    stack, ns = operator_stack, namespace
    stack.kube.create_object("kopf.dev/v1/clusterkopfpeerings", {"metadata": {"name": "ehb"}})
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}")

    def replica(priority: int, log: Path) -> subprocess.Popen[bytes]:
        with log.open("w") as out:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "eventhub_balancer",
                    "-v",
                    "operator",
                    "-A",
                    "--peering",
                    "ehb",
                    "--priority",
                    str(priority),
                    "--kubeconfig",
                    str(stack.kubeconfig),
                    "--metrics-insecure",
                    "--metrics-host",
                    "127.0.0.1",
                    "--metrics-port",
                    "0",
                    "--allow-development-endpoints",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    standby_log = tmp_path / "standby.log"
    active = replica(100, tmp_path / "active.log")
    standby: subprocess.Popen[bytes] | None = None
    try:
        wait_for(
            lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns),
            timeout=60,
            what="balanced by the replica at work",
        )
        standby = replica(1, standby_log)

        def peers() -> int:
            peering = stack.kube.get_object("kopf.dev/v1/clusterkopfpeerings", "ehb") or {}
            return len(peering.get("status") or {})

        # The standby has made itself known, and so is paused for the replica at work.
        wait_for(lambda: peers() == 2, timeout=60, what="both replicas in the peering")
        time.sleep(2.0)
        active.kill()
        active.wait(timeout=60)
        killed = time.monotonic()
        stack.delete_pod(ns, "c-0")
        wait_for(
            lambda: stack.counts(ns) == {"c-1": 32},
            timeout=90,
            what="c-0's partitions taken over by the standby",
        )
        took = time.monotonic() - killed
    finally:
        for process in (active, standby):
            if process is not None:
                process.kill()
                process.wait(timeout=60)
    print(f"the standby took c-0's partitions over {took:.1f} s after the SIGKILL")
    assert took < TAKEOVER_BOUND_SECONDS, standby_log.read_text()[-3000:]
