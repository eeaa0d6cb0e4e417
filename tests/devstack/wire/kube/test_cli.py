"""``ehb local kube`` as a user runs it: a process that prints its kubeconfig's path."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

kubernetes = pytest.importorskip("kubernetes")


def test_serves_until_sigterm(tmp_path: Path) -> None:
    target = tmp_path / "kc" / "config"
    process = subprocess.Popen(
        [sys.executable, "-m", "eventhub_balancer", "local", "kube", "--kubeconfig", str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        second = process.stdout.readline().strip()
        assert Path(first) == target.resolve()
        assert second == f"export KUBECONFIG={target.resolve()}"

        client = kubernetes.config.new_client_from_config(config_file=first)
        try:
            v1 = kubernetes.client.CoreV1Api(client)
            v1.create_namespaced_config_map("default", {"metadata": {"name": "via-cli"}})
            assert v1.read_namespaced_config_map("via-cli", "default").metadata.uid
            crds = kubernetes.client.ApiextensionsV1Api(client).list_custom_resource_definition()
            assert "eventhubconsumers.eventhub-balancer.dev" in {
                c.metadata.name for c in crds.items
            }
        finally:
            client.close()

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
        process.communicate()  # its pipes read to their end and closed


def test_a_taken_port_is_one_line_that_names_the_flag(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "eventhub_balancer", "local", "kube", "--port", str(port)]
        result = subprocess.run(
            [*argv, "--kubeconfig", str(tmp_path / "config")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"ehb: error: --port: 127.0.0.1:{port} is taken: choose another --port, or 0 for a free one"
    ]


def test_a_kubeconfig_that_cannot_be_written_is_one_line_that_names_the_flag(
    tmp_path: Path,
) -> None:
    """A directory (or '', the current one) was a traceback from open(), after the server had
    started; so was a path under a file."""
    (tmp_path / "file").write_text("")
    argv = [sys.executable, "-m", "eventhub_balancer", "local", "kube", "--kubeconfig"]
    for given, status, line in [
        (
            str(tmp_path),
            2,
            f"ehb: error: --kubeconfig: {tmp_path} is a directory: give the path "
            "of a file to write",
        ),
        ("", 2, "ehb: error: --kubeconfig: . is a directory: give the path of a file to write"),
        (
            str(tmp_path / "file" / "config"),
            1,
            f"ehb: error: --kubeconfig: cannot write "
            f"{tmp_path / 'file' / 'config'} ({tmp_path / 'file'}: File exists): give a path "
            "you may write",
        ),
    ]:
        result = subprocess.run(
            [*argv, given], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert (result.returncode, result.stderr.splitlines()) == (status, [line])
