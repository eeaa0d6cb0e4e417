"""A child process for `test_master_restart`: a standalone cluster of its own, a session on it
kept by `consumer.sessionkeeping.SessionKeeper`, the master restarted, then a trigger-sized job.

``python -m tests.spark.wire._master_restart --out FILE --logs DIR`` writes one JSON document
to FILE: whether the job on the old session ended (failed, as its session was let go), how
long after it started, the keeper's restarts, and a job's count on the session that replaced
it. A child process: a classic session is one per process, and the test session may hold a
local one already.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from eventhub_balancer.consumer import sessionkeeping
from eventhub_balancer.spark import sessions
from eventhub_balancer_devstack import sparkcluster

#: The job's wait on the old session: what the keeper's watch needs, with room.
JOB_WAIT_S = 120.0
#: How often the keeper asks the session here (`sessionkeeping.WATCH_S` is 10 s): its
#: `WATCH_STRIKES` noes then find the lost session in about 6 s rather than 30 s. A session
#: is built warm, as a pod's is (`build`: a job run on its executors), so the watch never
#: asks a session whose executors are still starting.
WATCH_S = 2.0
#: The longest wait for the killed master's process to be gone and its port free again.
PORT_FREE_TIMEOUT_S = 10.0

CONF = {
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
    "spark.driver.memory": "512m",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": sparkcluster.LIGHT_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": sparkcluster.LIGHT_JVM_OPTIONS,
}


def restart_master(cluster: sparkcluster.StandaloneCluster) -> sparkcluster.SparkProcess:
    """SIGKILL the master and start a new one on the same ports, with no recovery: the worker
    registers again, and the new master kills the executors of the application it does not
    know. Returns the new master (the caller stops it)."""
    port = cluster.url.rsplit(":", 1)[1]
    command: list[str] = []
    killed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if "org.apache.spark.deploy.master.Master" in argv and port in argv:
            command = argv[argv.index("org.apache.spark.deploy.master.Master") :]
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
    assert command, "the master's process was not found"
    home = sparkcluster.spark_home()
    master = sparkcluster.SparkProcess(
        "master-again",
        [str(home / "bin" / "spark-class"), *[a for a in command if a]],
        log_dir=cluster.log_dir,
        env=sparkcluster._environment(
            home, {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
        ),
    )
    _wait_port_free(killed, int(port))
    master.start()
    master.wait_until(
        lambda: _workers(cluster) >= 1, what="the worker back", timeout=sparkcluster.START_TIMEOUT_S
    )
    return master


def _wait_port_free(pids: list[int], port: int) -> None:
    """Until the killed processes are dead (gone, or zombies not reaped yet) and ``port`` can
    be bound again (as the JVM binds it: with SO_REUSEADDR)."""
    deadline = time.monotonic() + PORT_FREE_TIMEOUT_S
    while time.monotonic() < deadline:
        if not any(_running(pid) for pid in pids):
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((sparkcluster.HOST, port))
                except OSError:
                    pass
                else:
                    return
        time.sleep(0.05)
    raise AssertionError(f"port {port} not free {PORT_FREE_TIMEOUT_S:g} s after the master's kill")


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _workers(cluster: sparkcluster.StandaloneCluster) -> int:
    try:
        return int(str(cluster.status().get("aliveworkers", 0)))
    except (OSError, ValueError):
        return 0


def build(master: str) -> Any:
    """A session on ``master``, warm as a pod's (`spark.frames.warm_up` there): it has run a
    job, so its executors are up before the keeper's watch asks about them."""
    session = sessions.build_session(master=master, conf=CONF)
    session.range(1).count()
    return session


async def scenario(cluster: sparkcluster.StandaloneCluster) -> dict[str, Any]:
    sessionkeeping.WATCH_S = WATCH_S  # this child process's own keeper
    keeper = sessionkeeping.SessionKeeper(
        lambda: asyncio.to_thread(build, cluster.url),
        alive=lambda s: asyncio.to_thread(sessions.is_alive, s),
        discard=lambda s: asyncio.to_thread(sessions.discard, s),
    )
    old = await keeper.get()
    result: dict[str, Any] = {
        "before": await asyncio.to_thread(old.range(10).count),
        "watch_s": sessionkeeping.WATCH_S,
    }
    master = restart_master(cluster)
    try:
        began = time.monotonic()
        job = asyncio.ensure_future(asyncio.to_thread(old.range(10).count))
        done, _ = await asyncio.wait({job}, timeout=JOB_WAIT_S)
        result["job_ended"] = bool(done)
        result["job_took"] = time.monotonic() - began
        result["job_failed"] = bool(done) and job.exception() is not None
        result["restarts"] = keeper.restarts
        if done:
            new = await asyncio.wait_for(keeper.get(), sparkcluster.START_TIMEOUT_S)
            result["replaced"] = new is not old
            result["after"] = await asyncio.to_thread(new.range(10).count)
            result["ready"] = keeper.ready()[0]
        await keeper.stop(lambda s: asyncio.to_thread(s.stop))
        if not done:
            await asyncio.to_thread(sessions.discard, old)  # ends the hung job
    finally:
        master.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--logs", required=True)
    args = parser.parse_args()
    with sparkcluster.standalone_cluster(log_dir=Path(args.logs)) as cluster:
        result = asyncio.run(scenario(cluster))
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
