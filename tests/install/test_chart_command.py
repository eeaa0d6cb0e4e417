"""`ehb chart sync-crds` on a scratch repository: writes, reports and checks drift."""

from pathlib import Path

import pytest

from eventhub_balancer import cli
from eventhub_balancer_devstack.commands import chart


def scratch(tmp_path: Path) -> Path:
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "a.yaml").write_text("kind: CustomResourceDefinition\n")
    (tmp_path / "charts" / "eventhub-balancer").mkdir(parents=True)
    return tmp_path


def test_sync_writes_the_copy_and_removes_orphans(tmp_path: Path) -> None:
    root = scratch(tmp_path)
    target = root / chart.CHART_CRDS_DIR
    target.mkdir()
    (target / "old.yaml").write_text("stale\n")
    found = chart.sync(root)
    assert found == chart.Drift(missing=("a.yaml",), extra=("old.yaml",))
    assert sorted(p.name for p in target.iterdir()) == ["a.yaml"]
    assert (target / "a.yaml").read_bytes() == (root / "crds" / "a.yaml").read_bytes()
    assert not chart.drift(root)


def test_check_reports_a_changed_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = scratch(tmp_path)
    chart.sync(root)
    (root / chart.CHART_CRDS_DIR / "a.yaml").write_text("edited by hand\n")
    assert cli.main(["chart", "sync-crds", "--check", "--root", str(root)]) == 1
    assert "changed: a.yaml" in capsys.readouterr().err
    assert cli.main(["chart", "sync-crds", "--root", str(root)]) == 0
    assert cli.main(["chart", "sync-crds", "--check", "--root", str(root)]) == 0


def test_a_wrong_root_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["chart", "sync-crds", "--check", "--root", str(tmp_path)]) == cli.EXIT_USAGE
    assert "give the repository root" in capsys.readouterr().err
