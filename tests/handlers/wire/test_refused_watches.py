"""``ehb operator`` whose identity may not watch what it serves (the chart's RBAC not applied,
or bound to another ServiceAccount): one line that names the right, whose it is and what to
apply, and exit status 1.

Replayed on the local API server, which answers the watches of EventHubConsumers 403 with the
body kube-apiserver's RBAC gives: kopf retried for about a minute (one warning), then wrote
154 lines, kopf's escalation, two tracebacks of its tasks and the one the interpreter printed
for the error escaping ``ehb`` (290 with the pods refused too). kopf's backoffs are shortened
here to a few tenths of a second; what is said at the end does not depend on them.

kopf's stop after the refusal could hang for good (`kopfrefusals.run` says how): a watch that
was opening its request when kopf cancelled it took the cancellation for its pause's, and
waited for closed credentials. With the ConfigMaps' watch held before its answer, four of
eight such stops hung, until kopf's SIGKILL 10 minutes on; the test's time-out stops it first.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from eventhub_balancer import cli
from eventhub_balancer_devstack.kube import LocalKubeAPI

NS = "shop"
USER = "system:serviceaccount:eventhub-balancer-system:eventhub-balancer"
EHC = (
    "eventhub-balancer.dev/v1alpha1/eventhubconsumers",
    "eventhubconsumers",
    "eventhub-balancer.dev",
)
PODS = ("v1/pods", "pods", "")
#: How long the held watch is held at most (the test ends it before).
HELD_SECONDS = 120.0


def forbidden(resource: str, group: str) -> dict[str, Any]:
    """What kube-apiserver answers a LIST that RBAC does not allow."""
    qualified = f"{resource}.{group}" if group else resource
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{qualified} is forbidden: User "{USER}" cannot list resource "{resource}" '
        f'in API group "{group}" in the namespace "{NS}"',
        "reason": "Forbidden",
        "details": {"kind": resource, **({"group": group} if group else {})},
        "code": 403,
    }


class Held:
    """The server's answer to the ConfigMaps' watch, kept until the test ends (then a 500)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    async def __call__(self) -> kmock.Response:
        for _ in range(int(HELD_SECONDS / 0.05)):
            if self.released.is_set():
                break
            await asyncio.sleep(0.05)
        return kmock.Response(status=500)


@pytest.fixture
def held() -> Iterator[Held]:
    hold = Held()
    yield hold
    hold.released.set()


def said(caplog: pytest.LogCaptureFixture, stderr: str) -> list[str]:
    """Every line a user reads at the default level: the log's records from WARNING up
    (tracebacks included) and what went to stderr."""
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    logged = [line for r in records for line in caplog.handler.format(r).splitlines()]
    return logged + stderr.splitlines()


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("refused", "hold"),
    [([EHC], False), ([EHC, PODS], False), ([EHC, PODS], True)],
    ids=["eventhubconsumers", "eventhubconsumers and pods", "both, the configmaps' watch held"],
)
def test_an_operator_refused_its_watch_says_so_in_one_line_and_exits_1(
    local_kube: LocalKubeAPI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    short_backoffs: None,
    held: Held,
    refused: list[tuple[str, str, str]],
    hold: bool,
) -> None:
    """With the pods refused too (no RBAC at all), kopf's stop added errors of its own: its
    other watch cut short, retried and refused again while it stopped. The errors of kopf's
    tasks it did not read were printed as "never retrieved" when the process exited: the
    collection at the end brings them forward."""
    kubeconfig = local_kube.write_kubeconfig(tmp_path / "kubeconfig")
    for path, resource, group in refused:
        local_kube.handler[kmock.resource(path)] << 403 << forbidden(resource, group)
    if hold:
        local_kube.handler["watch", kmock.resource("v1/configmaps")] << held
    with caplog.at_level(logging.WARNING):
        status = cli.main(
            [
                "operator",
                "-n",
                NS,
                "--kubeconfig",
                str(kubeconfig),
                "--metrics-insecure",
                "--metrics-host",
                "127.0.0.1",
                "--metrics-port",
                "0",
            ]
        )
        gc.collect()
    err = capsys.readouterr().err
    lines = said(caplog, err)
    assert status == 1, "\n".join(lines)
    assert not [line for line in lines if "Traceback" in line], "\n".join(lines)
    # kopf's first retry (one warning, `kopfretrylogs`) and the error: nothing else.
    assert len(lines) <= 2, "\n".join(lines)
    # The warning says what comes of a refusal, and quotes the API server's message once.
    (warning,) = [line for line in lines if "kopf's requests" in line]
    assert "refused (403)" in warning, warning
    assert "then the operator stops" in warning, warning
    assert "every 10 minutes" not in warning, warning
    assert warning.count("cannot list resource") == 1, warning
    (error,) = err.splitlines()
    assert error.startswith("ehb: error: the operator's identity, ServiceAccount ")
    refusals = [
        f"may not list {resource}{'.' + group if group else ''} in namespace {NS}"
        for _, resource, group in refused
    ]
    assert any(refusal in error for refusal in refusals), error
    for named in (
        "ServiceAccount eventhub-balancer-system/eventhub-balancer",
        "ClusterRole",
        "rbac.create",
        "manifests/install/20-rbac.yaml",
    ):
        assert named in error
