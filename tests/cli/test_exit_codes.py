"""The exit codes docs/exit-codes.md lists, one command of each kind."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from eventhub_balancer import cli
from eventhub_balancer.cli import status
from eventhub_balancer.consumer import exits

DOC = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"


def exit_code(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse's own refusals
        return int(e.code or 0)


def test_a_dependency_that_says_no_is_1() -> None:
    assert exit_code(["operator", "--kubeconfig", "/nonexistent", "-n", "shop"]) == 1


def refused_port() -> int:
    """A port of loopback bound by nobody: connections to it are refused."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port: int = closed.getsockname()[1]
    return port


def kubeconfig_for(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    return path


@pytest.mark.parametrize(
    "argv",
    [["--no-such-flag"], ["consume"], ["status", "-A", "orders"], ["plan", "--partitions", "x"]],
)
def test_usage_mistakes_are_2(argv: list[str]) -> None:
    assert exit_code(argv) == cli.EXIT_USAGE == 2


def test_an_interrupt_is_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(status, "run", interrupted)
    assert exit_code(["status", "-n", "shop"]) == 130


def test_the_page_lists_every_code_the_product_uses() -> None:
    listed = DOC.read_text()
    for code in (0, 1, cli.EXIT_USAGE, cli.EXIT_UNAVAILABLE, exits.EXIT_HANDLER_HUNG, 130):
        assert f"| {code} |" in listed


def row(code: int) -> str:
    (line,) = [line for line in DOC.read_text().splitlines() if line.startswith(f"| {code} |")]
    return line


def test_ctrl_c_stops_a_command_that_runs_until_stopped_with_0_as_the_page_says() -> None:
    """Ctrl-C is how a server (the local stack, the operator, a consumer) is stopped: it stops
    cleanly and exits 0, as on SIGTERM; only a command cut short is 130."""
    process = subprocess.Popen(
        [sys.executable, "-m", "eventhub_balancer", "local", "eventhubs", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("Endpoint=sb://127.0.0.1:")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
        process.communicate()  # its pipes read to their end and closed
    assert "Ctrl-C" in row(0)
    for command in ("`ehb operator`", "`ehb consume`", "`ehb local"):
        assert command in row(0)
    assert "cut short" in row(130)
