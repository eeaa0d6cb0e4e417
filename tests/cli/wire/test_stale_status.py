"""``ehb status`` with the operator stopped, on the local stack: the operator writes a status
only when something changes, so the one it left behind read as current however the pods had
moved on. The pods the selector matches now are compared with it, and the difference said."""

from __future__ import annotations

import json

import pytest

from eventhub_balancer import cli
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for


def ehb_status(capsys: pytest.CaptureFixture[str], stack: Stack, ns: str, *argv: str) -> str:
    capsys.readouterr()
    assert cli.main(["status", "-n", ns, "--kubeconfig", str(stack.kubeconfig), *argv]) == 0
    return capsys.readouterr().out


def test_a_deleted_pod_under_a_stopped_operator_is_said_not_shown_ready(
    operator_stack: Stack, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    stack.consumer(ns, hub="small")
    stack.pod(ns, "c-0")
    stack.pod(ns, "c-1")
    operator = stack.start_operator(namespaces=(ns,))
    with ConsumerDouble(stack.kube, ns):
        wait_for(lambda: stack.balanced(ns), what="balanced over c-0 and c-1")
        wait_for(lambda: "behind" not in ehb_status(capsys, stack, ns), what="a current status")
        stack.stop_operator(operator)
        stack.delete_pod(ns, "c-1")
        shown = ehb_status(capsys, stack, ns)
    print(shown)
    lines = shown.splitlines()
    assert lines[0].startswith(f"{ns}/orders: the status is behind the pods: c-1 (holding ")
    assert (
        ") is gone. An operator updates it within seconds of a change; if this stays, "
        in (lines[0])
    )
    assert f"is an operator running that serves namespace {ns}?" in lines[0]
    as_json = json.loads(ehb_status(capsys, stack, ns, "--json"))
    assert as_json[0]["hints"] == [lines[0]]
