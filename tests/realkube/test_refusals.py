"""The local node's refused pods: a missing Secret is tried again, as a kubelet does, and a
spec it cannot run is not; a retry refused for the same reason is not news."""

from __future__ import annotations

from typing import Any

import pytest

from eventhub_balancer_devstack.realkube import refusals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(refusals.time, "monotonic", fake)
    return fake


def pod(uid: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "resourceVersion": version}}


def test_a_pod_refused_for_a_missing_secret_is_due_again_after_the_retry(clock: Clock) -> None:
    found = refusals.Refusals()
    assert found.refuse(pod("a"), why='secret "eh" not found', again=True)
    assert "a" in found
    assert found.due() == []
    found.seen(pod("a", version="2"))  # a newer body, for the retry to start from
    clock.now += refusals.RETRY_S
    assert found.due() == [pod("a", version="2")]
    assert "a" not in found  # taken off until the retry says otherwise
    assert found.due() == []


def test_a_spec_that_cannot_run_is_refused_for_good(clock: Clock) -> None:
    found = refusals.Refusals()
    assert found.refuse(pod("b"), why="containers[0].command: not run here", again=False)
    clock.now += 10 * refusals.RETRY_S
    assert found.due() == []
    assert "b" in found
    found.forget("b")  # the pod deleted
    assert "b" not in found


def test_only_a_new_reason_is_news(clock: Clock) -> None:
    found = refusals.Refusals()
    assert found.refuse(pod("a"), why='secret "eh" not found', again=True)
    clock.now += refusals.RETRY_S
    (again,) = found.due()
    assert not found.refuse(again, why='secret "eh" not found', again=True)
    clock.now += refusals.RETRY_S
    (again,) = found.due()
    assert found.refuse(again, why="couldn't find key cs in Secret shop/eh", again=True)
    found.forget("a")
    assert found.refuse(pod("a"), why="couldn't find key cs in Secret shop/eh", again=True)
