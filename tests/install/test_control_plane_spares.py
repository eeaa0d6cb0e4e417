"""`tests.support.fixtures.realkube.Spares`: each module gets a control plane of its own,
started while the module before it ran.

The control plane is replaced by a double that records where and when it starts and stops;
the real one is tested where it is used (tests/realkube/wire).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures import realkube


class Plane:
    """A control plane double: started in some thread, stopped once."""

    made: list[Plane] = []
    fail_next = False

    def __init__(self, *, folder: Path) -> None:
        self.folder = folder
        self.started_in: str | None = None
        self.stops = 0
        Plane.made.append(self)

    def start(self) -> Plane:
        if Plane.fail_next:
            Plane.fail_next = False
            raise RuntimeError("etcd did not start")
        self.started_in = threading.current_thread().name
        return self

    def stop(self) -> None:
        self.stops += 1


@pytest.fixture
def spares(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> realkube.Spares:
    monkeypatch.setattr(Plane, "made", [])
    monkeypatch.setattr(realkube, "RealControlPlane", Plane)
    return realkube.Spares(tmp_path_factory)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_each_module_gets_its_own_plane_and_the_next_starts_ahead(
    spares: realkube.Spares,
) -> None:
    first: Any = spares.take()
    assert len(Plane.made) == 2  # the first module's, and the next one started ahead
    second: Any = spares.take()
    assert second is Plane.made[1]  # the one started ahead
    assert len({id(first), id(second)}) == 2
    assert first.folder != second.folder
    # Every plane starts in the one thread that outlives them (their processes end with it).
    spares.close()
    assert {p.started_in for p in Plane.made} == {"controlplane-spare_0"}
    # The one started ahead for a third module that never came is stopped; the modules stop
    # their own.
    assert [p.stops for p in Plane.made] == [0, 0, 1]


def test_a_plane_that_failed_to_start_ahead_is_replaced_by_a_fresh_start(
    spares: realkube.Spares,
) -> None:
    spares.take()
    Plane.fail_next = True
    spares.take()  # the first module ends; the one started ahead failed
    Plane.fail_next = False
    taken: Any = spares.take()
    assert taken.started_in is not None
    spares.close()


def test_a_plane_no_module_takes_in_time_is_stopped_and_the_next_module_starts_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setattr(Plane, "made", [])
    monkeypatch.setattr(realkube, "RealControlPlane", Plane)
    spares = realkube.Spares(tmp_path_factory, kept_s=0.05)
    spares.take()
    ahead = Plane.made[1]
    assert wait_until(lambda: ahead.stops == 1), "the idle plane was never stopped"
    taken: Any = spares.take()
    assert taken is Plane.made[2]  # a fresh start, not the stopped one
    spares.close()
    assert ahead.stops == 1
    assert taken.stops == 0  # its module stops it
