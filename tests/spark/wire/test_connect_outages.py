"""A Spark Connect server that goes away: the pod's calls fail within seconds, not minutes.

pyspark's Connect client retries a call that meets an unavailable server for at least 10
minutes. A trigger in flight when the server was killed, the session's liveness check and
a session's start all blocked that long, the pod Ready and its partitions still; the
disposal of the lost session then ran past its bound and stopped the pod instead of
replacing the session. `sessions.build_session` bounds the retries
(`sessions.CONNECT_RETRY_POLICY`, about 15 s) and `sessions.discard` releases once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.consumer import sessionkeeping
from eventhub_balancer.spark import sessions
from tests.support.fixtures.spark import spark_unavailable

#: pyspark says so when its bounded retries run out, which is what these tests make happen.
pytestmark = pytest.mark.filterwarnings(r"ignore:\[RETRIES_EXCEEDED\]:UserWarning")

#: The retries' bound (about 15 s) with room for a loaded two-core machine; pyspark's own
#: default is 10 minutes and more.
FAILS_WITHIN_S = 45.0


@pytest.fixture(autouse=True)
def _connect_mode_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Connect session marks this process as a Connect client; later classic sessions of
    # the test session must not inherit that.
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "")
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED")


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` in a thread of its own; fails the test if it has not ended in time."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        pytest.fail(f"still blocked after {seconds:g} s")
    finally:
        pool.shutdown(wait=False)


@pytest.fixture
def mute_server() -> Iterator[str]:
    """``sc://`` of a port that accepts connections and closes them: a server that is there
    and never answers (starting, restarting, or not a Connect server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"sc://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_connect_server_that_never_answers_fails_the_start_in_seconds(
    mute_server: str,
) -> None:
    if spark_unavailable() == "pyspark is not installed (pip install 'eventhub-balancer[spark]')":
        pytest.skip("needs the Spark Connect client")
    began = time.monotonic()
    with pytest.raises(errors.ConfigurationError, match="did not open a session"):
        within(FAILS_WITHIN_S, lambda: sessions.build_session(remote=mute_server))
    assert time.monotonic() - began < FAILS_WITHIN_S


def _server_pids(port: int) -> list[int]:
    """The processes this test's Connect server runs as (its JVM names its port)."""
    needle = f"spark.connect.grpc.binding.port={port}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_connect_server_killed_mid_trigger_fails_it_and_the_session_is_let_go(
    tmp_path: Path,
) -> None:
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    from eventhub_balancer_devstack import sparkcluster

    # A server of its own: this test kills it.
    with sparkcluster.connect_server(log_dir=tmp_path) as server:
        session = sessions.build_session(remote=server.url)
        assert session.range(5).count() == 5
        # A trigger whose job runs for 60 s on the server, killed 3 s in.
        trigger = concurrent.futures.ThreadPoolExecutor(1)
        slow_job = session.range(1).selectExpr(
            "reflect('java.lang.Thread', 'sleep', cast(60000 as bigint))"
        )
        running = trigger.submit(slow_job.collect)
        time.sleep(3)
        pids = _server_pids(server.port)
        assert pids, "the Connect server's process was not found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        began = time.monotonic()
        try:
            with pytest.raises(Exception) as failed:  # noqa: PT011 (whatever gRPC says)
                running.result(timeout=FAILS_WITHIN_S)
            assert not isinstance(failed.value, concurrent.futures.TimeoutError), (
                f"the trigger still runs {FAILS_WITHIN_S:g} s after its server was killed"
            )
        finally:
            trigger.shutdown(wait=False)
        assert time.monotonic() - began < FAILS_WITHIN_S
        # Found lost as the keeper finds it: a no, or no answer within its bound (the check's
        # own retries take about 15 s); then let go within the keeper's bound, which ends the
        # check too: the pod then replaces the session instead of stopping.
        calls = concurrent.futures.ThreadPoolExecutor(1)
        try:
            check = calls.submit(sessions.is_alive, session)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                assert check.result(timeout=sessionkeeping.ALIVE_TIMEOUT_S) is False
            began = time.monotonic()
            within(FAILS_WITHIN_S, lambda: sessions.discard(session))
            assert time.monotonic() - began < sessionkeeping.DISCARD_TIMEOUT_S
            assert check.result(timeout=sessionkeeping.DISCARD_TIMEOUT_S) is False
        finally:
            calls.shutdown(wait=False)


def test_a_connect_server_that_stops_answering_mid_trigger_is_let_go_at_once(
    tmp_path: Path,
) -> None:
    """A server that accepts calls and never answers them (its JVM frozen: SIGSTOP, a
    garbage-collection spiral, a node out of CPU). Letting its session go released the session
    on the server first and waited for that call, for minutes: past the keeper's bound the pod
    stopped instead of replacing the session. Now the channel is closed first: the disposal
    takes no time, and the trigger that waits on the server fails at once."""
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    from eventhub_balancer_devstack import sparkcluster

    with sparkcluster.connect_server(log_dir=tmp_path) as server:
        session = sessions.build_session(remote=server.url)
        assert session.range(5).count() == 5
        pids = _server_pids(server.port)
        assert pids, "the Connect server's process was not found"
        calls = concurrent.futures.ThreadPoolExecutor(2)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            trigger = calls.submit(lambda: session.range(5).count())
            check = calls.submit(sessions.is_alive, session)
            # No answer: the keeper's bound makes it lost. A channel that gRPC already gave up
            # on answers False sooner (seen on a loaded machine); the keeper reads it the same.
            with contextlib.suppress(concurrent.futures.TimeoutError):
                assert check.result(timeout=sessionkeeping.ALIVE_TIMEOUT_S) is False
            began = time.monotonic()
            within(sessionkeeping.DISCARD_TIMEOUT_S, lambda: sessions.discard(session))
            assert time.monotonic() - began < sessionkeeping.DISCARD_TIMEOUT_S
            with pytest.raises(Exception) as failed:  # noqa: PT011 (whatever gRPC says)
                trigger.result(timeout=sessionkeeping.DISCARD_TIMEOUT_S)
            assert not isinstance(failed.value, concurrent.futures.TimeoutError), (
                "the trigger still waits on the frozen server after its session was let go"
            )
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
            calls.shutdown(wait=False)
