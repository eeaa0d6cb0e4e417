"""``ehb operator`` as a process: SIGTERM ends it within its bound, whatever the API server does.

The operator runs as the command does (its own process, its own signal handling), against the
local API server and the Event Hubs emulator. Kubernetes kills a pod that has not exited
30 s after its SIGTERM (``terminationGracePeriodSeconds``), and a standalone operator is
replaced with the ``Recreate`` strategy: each second the old one lingers, no consumer is
balanced.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.fixtures.operator import Stack, wait_for

#: The daemons' cycles in flight get 5 s (`kopfwiring.CYCLE_FINISH_SECONDS`); the rest of the
#: stop takes a second or two. Well inside Kubernetes' 30 s.
EXIT_BOUND_SECONDS = 12.0


def test_sigterm_while_the_api_server_hangs_exits_within_the_bound(
    operator_stack: Stack, namespace: str, tmp_path: Path
) -> None:
    """A control plane that stops answering (an upgrade, a partition) while the operator is
    rolled: the requests in flight wait out their timeouts, which the client retries (four
    attempts of 15 s). The operator stopped 58 s after its SIGTERM, all of it waiting for
    answers nobody would read."""
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}")
    log_path = tmp_path / "operator.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "eventhub_balancer",
                "-v",
                "operator",
                "-n",
                ns,
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
            lambda: sorted(stack.counts(ns).values()) == [16, 16] and stack.balanced(ns),
            timeout=60,
            what="balanced by the operator process",
        )
        stack.kube.pause()
        # The pods are listed afresh every 10 s: that LIST is in flight, unanswered.
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
        process.kill()
        process.wait(timeout=60)
    output = log_path.read_text()
    print(f"exited with {code} {took:.1f} s after SIGTERM")
    assert code == 0, f"still running {took:.1f} s after SIGTERM:\n{output[-3000:]}"
    assert took < EXIT_BOUND_SECONDS
    assert "requests still in flight" in output
