"""The exit codes docs/exit-codes.md lists that need an API server: not found against one
that answers, and one that does not answer at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventhub_balancer import cli
from eventhub_balancer.consumer import exits
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.cli.test_exit_codes import exit_code, kubeconfig_for, refused_port, row


def test_what_is_not_there_is_1_and_an_api_that_does_not_answer_is_its_own_code(
    local_kube: LocalKubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script tells "no such consumer" (1, as ever) from "the API server did not answer,
    ask again" (`cli.EXIT_UNAVAILABLE`): both were 1."""
    there = local_kube.write_kubeconfig(tmp_path / "there")
    missing = exit_code(["status", "orders", "-n", "shop", "--kubeconfig", str(there)])
    assert "not found" in capsys.readouterr().err
    nobody = kubeconfig_for(tmp_path, f"http://127.0.0.1:{refused_port()}")
    unreachable = exit_code(["status", "orders", "-n", "shop", "--kubeconfig", str(nobody)])
    assert "cannot reach the Kubernetes API server" in capsys.readouterr().err
    assert (missing, unreachable) == (1, cli.EXIT_UNAVAILABLE)
    assert cli.EXIT_UNAVAILABLE not in (0, 1, cli.EXIT_USAGE, exits.EXIT_HANDLER_HUNG, 130)
    assert "`ehb status`" in row(cli.EXIT_UNAVAILABLE)
