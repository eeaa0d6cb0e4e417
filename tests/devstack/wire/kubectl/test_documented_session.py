"""docs/local-stack.md's kubectl session against the local API, command by command, and its
output as the page prints it.

A reader copies the session and compares what kubectl prints with the page; a column the CRD
gained (``REASON``) went into one of the page's tables and not the other. The columns are
compared word by word (their widths follow the longest value), ``AGE`` as a number of seconds.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support.fixtures import kube as kube_fixtures

ROOT = Path(__file__).resolve().parents[4]
PAGE = ROOT / "docs" / "local-stack.md"
HEADING = "### With kubectl"
AGE = re.compile(r"^\d+s$")

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def session() -> list[tuple[str, list[str]]]:
    """The page's console block under HEADING: each ``$`` command with the lines after it."""
    text = PAGE.read_text()
    block = text[text.index(HEADING) :]
    block = block[block.index("```console\n") + len("```console\n") :]
    block = block[: block.index("```")]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def words(lines: list[str]) -> list[list[str]]:
    return [["<age>" if AGE.match(w) else w for w in line.split()] for line in lines if line]


def test_the_page_has_the_session() -> None:
    commands = [command for command, _ in session()]
    assert any(c.startswith("kubectl apply") for c in commands)
    assert any(c.startswith("kubectl -n shop patch") for c in commands)


def test_the_documented_session_prints_what_the_page_shows(
    local_kube: LocalKubeAPI, kubeconfig: Path
) -> None:
    binary = kube_fixtures.kubectl_binary()
    if binary is None:
        pytest.fail("no kubectl: install the devstack (pip install -e ./devstack)")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}
    waiting: subprocess.Popen[str] | None = None
    try:
        for command, expected in session():
            if command.startswith("export "):
                continue
            argv = shlex.split(command.removesuffix(" &"))
            assert argv[0] == "kubectl", command
            argv[0] = binary
            if command.endswith(" &"):
                # In the background, as the page runs it: its line follows the next command's.
                waiting = subprocess.Popen(
                    argv,
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                continue
            result = subprocess.run(
                argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
            )
            assert result.returncode == 0, (command, result.stderr)
            printed = result.stdout.splitlines()
            if waiting is not None:
                out, err = waiting.communicate(timeout=60)
                assert waiting.returncode == 0, err
                printed += out.splitlines()
                waiting = None
            assert words(printed) == words(expected), command
    finally:
        if waiting is not None and waiting.poll() is None:
            waiting.kill()
            waiting.wait(timeout=5)
