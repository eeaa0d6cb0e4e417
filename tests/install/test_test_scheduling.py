"""The order in which ``make test``'s two workers take the test files
(`tests.support.scheduling`): the files that start real components first."""

from __future__ import annotations

from pathlib import Path

from tests.support import scheduling


def queue(*scopes: str) -> dict[str, dict[str, bool]]:
    return {scope: {f"{scope}::test_x": False} for scope in scopes}


def test_the_heavy_files_go_first_and_each_kind_keeps_xdists_order(tmp_path: Path) -> None:
    (tmp_path / "tests" / "install").mkdir(parents=True)
    (tmp_path / "tests" / "install" / "test_slow.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.slow\n"
    )
    (tmp_path / "tests" / "install" / "test_fast.py").write_text("def test_x() -> None: ...\n")
    work = queue(
        "tests/planner/test_many.py",
        "tests/install/test_fast.py",
        "tests/handlers/wire/test_a.py",
        "tests/install/test_slow.py",
        "tests/spark/test_b.py",
        "tests/devstack/chaos/test_c.py",
        "tests/consumer/test_gone.py",  # no such file: light
    )
    assert [scope for scope, _ in scheduling.ordered(tmp_path, work)] == [
        "tests/handlers/wire/test_a.py",
        "tests/install/test_slow.py",
        "tests/spark/test_b.py",
        "tests/devstack/chaos/test_c.py",
        "tests/planner/test_many.py",
        "tests/install/test_fast.py",
        "tests/consumer/test_gone.py",
    ]


def test_a_folder_named_like_a_heavy_one_counts_only_as_a_folder(tmp_path: Path) -> None:
    assert scheduling.is_heavy(tmp_path, "tests/handlers/wire/test_a.py")
    assert not scheduling.is_heavy(tmp_path, "tests/handlers/test_wire.py")
