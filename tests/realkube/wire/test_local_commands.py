"""`ehb local kube --real` and `ehb local up --kube real`: the real control plane from the
command line, stopped by its pids; a missing build and a taken port are one clear line each."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eventhub_balancer import errors
from eventhub_balancer_devstack.realkube import RealControlPlane, processes
from tests.support.fixtures.realkube import make_kubectl
from tests.support.liveprocesses import alive, children

#: The real control plane starts in 4-10 s here; a loaded machine needs the margin.
START_S = 120.0


def ehb(*args: str) -> list[str]:
    return [sys.executable, "-m", "eventhub_balancer", *args]


def test_ehb_local_kube_real_serves_kubectl_and_stops_every_process(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        ehb("local", "kube", "--real", "--kubeconfig", str(kubeconfig)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        assert first == str(kubeconfig.resolve()), process.stderr.read() if process.stderr else ""
        kubectl = make_kubectl(kubeconfig)
        assert "v1.37.2" in kubectl("version").stdout
        kubectl("create", "namespace", "shop")
        assert "shop" in kubectl("get", "namespaces").stdout
        assert "eventhubconsumers" in kubectl("api-resources").stdout
        spawned = children(process.pid)
        assert len(spawned) >= 3, spawned
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode == 0
    assert not [pid for pid in spawned if alive(pid)]


def test_missing_binaries_name_the_make_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EHB_CONTROLPLANE_BIN", str(tmp_path))
    with pytest.raises(processes.MissingBinaries, match=r"run `make controlplane`"):
        RealControlPlane().start()
    done = subprocess.run(
        ehb("local", "kube", "--real"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EHB_CONTROLPLANE_BIN": str(tmp_path)},
        check=False,
    )
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert "make controlplane" in line


def test_a_taken_port_names_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(errors.ConfigurationError, match="--kube-port"):
            RealControlPlane(port=port).start()


def test_a_port_taken_after_it_was_chosen_costs_a_start_on_other_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port chosen free may be taken by another process before a server binds it: etcd then
    exits with "address already in use", and the start is made again on ports chosen afresh.
    In a clean-clone run, kube-apiserver met such a port and the test that needed it failed."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        chosen = processes.free_port
        given = iter([port])
        monkeypatch.setattr(processes, "free_port", lambda: next(given, None) or chosen())
        with RealControlPlane() as plane:
            assert plane.readyz()
        assert next(given, None) is None  # the taken port was handed out, and met


def test_ehb_local_up_kube_real_runs_a_node(tmp_path: Path) -> None:
    argv = ehb("local", "up", "--kube", "real", "--hub", "orders=2", f"--state-dir={tmp_path}")
    argv += ["--eventhubs-port=0", "--blob-port=0", "--kube-port=0"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and not (lines and lines[-1].startswith("Ctrl-C")):
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
        text = "\n".join(lines)
        assert "https://127.0.0.1:" in text, text
        assert "Node ehb-local-node runs the pods of: eventhub-balancer-consumer" in text
        nodes = make_kubectl(tmp_path / "kubeconfig")("get", "nodes").stdout
        assert "ehb-local-node" in nodes
        assert " Ready " in nodes
        spawned = children(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode == 0
    assert not [pid for pid in spawned if alive(pid)]
