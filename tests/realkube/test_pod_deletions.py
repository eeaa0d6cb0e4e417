"""The local node confirms a pod's deletion as a kubelet does, and an API away is no traceback.

`ehb local up --kube real` stopped with Ctrl-C while a pod was terminating printed a 90-line
traceback: the node's reaper thread confirmed the deletion on an API server that was stopping,
and ``Connection reset by peer`` escaped the thread. The calls here are a fake that fails as an
API server that went away does.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack.realkube import podstatuses

METADATA = {"namespace": "shop", "name": "orders-0", "uid": "u-1"}
RESET = urllib3.exceptions.ProtocolError(
    "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")
)


class Calls:
    """Answers each DELETE with the next of ``answers``: an exception is raised."""

    def __init__(self, *answers: BaseException | None) -> None:
        self.answers = list(answers)
        self.made: list[tuple[str, str, Any]] = []

    def call(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]:
        self.made.append((method, path, body))
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        return {}


def test_the_deletion_is_made_with_grace_0_on_the_pods_uid() -> None:
    calls = Calls(None)
    podstatuses.confirm_deleted(calls, METADATA, stopping=threading.Event())  # type: ignore[arg-type]
    ((method, path, body),) = calls.made
    assert (method, path) == ("DELETE", "/api/v1/namespaces/shop/pods/orders-0")
    assert body["gracePeriodSeconds"] == 0
    assert body["preconditions"] == {"uid": "u-1"}


def test_a_pod_gone_already_is_no_error() -> None:
    calls = Calls(ApiException(status=404), ApiException(status=409))
    for _ in range(2):
        podstatuses.confirm_deleted(calls, METADATA, stopping=threading.Event())  # type: ignore[arg-type]
    assert len(calls.made) == 2


def test_an_api_away_as_the_node_stops_is_said_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    stopping = threading.Event()
    stopping.set()
    calls = Calls(RESET)
    podstatuses.confirm_deleted(calls, METADATA, stopping=stopping)  # type: ignore[arg-type]
    assert len(calls.made) == 1
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_an_api_away_while_the_node_runs_is_tried_again_then_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(podstatuses, "CONFIRM_RETRY_S", 0.0)
    calls = Calls(RESET, ConnectionRefusedError(111, "Connection refused"), None)
    podstatuses.confirm_deleted(calls, METADATA, stopping=threading.Event())  # type: ignore[arg-type]
    assert len(calls.made) == 3
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    caplog.clear()
    calls = Calls(*[RESET] * podstatuses.CONFIRM_TRIES)
    podstatuses.confirm_deleted(calls, METADATA, stopping=threading.Event())  # type: ignore[arg-type]
    assert len(calls.made) == podstatuses.CONFIRM_TRIES
    (said,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said.startswith("pod shop/orders-0: deletion not confirmed after 10 tries")
