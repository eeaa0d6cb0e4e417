"""`ehb spark archive`'s two runs, with the driver's runs faked: the archive takes its name only
once a driver has started from it, and nothing half-written is left behind.

The real runs (two Spark drivers, about a minute) are `make install`'s, which writes the suite's
archive with this command; ``tests/spark/wire/test_sessions.py`` starts a driver that must map
it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from eventhub_balancer import cli, errors
from eventhub_balancer.spark import classarchives

Run = Callable[..., None]


class Driver:
    """Stands in for `classarchives._run_workload`: records each run's JVM options; the
    dumping run writes ``written`` bytes to the file ``-XX:ArchiveClassesAtExit`` names, the
    checking run fails when ``maps`` is False."""

    def __init__(self, *, written: bytes | None = b"classes", maps: bool = True) -> None:
        self.written, self.maps = written, maps
        self.options: list[str] = []

    def __call__(self, folder: str, submit_opts: str, *, timeout: float) -> None:
        self.options.append(submit_opts)
        dumping = re.search(r"-XX:ArchiveClassesAtExit=(\S+)", submit_opts)
        if dumping is not None:
            if self.written is not None:
                Path(dumping.group(1)).write_bytes(self.written)
            return
        assert "-Xshare:on" in submit_opts, "the check must fail on an archive it cannot map"
        if not self.maps:
            raise errors.ConfigurationError("the Spark driver's run failed (exit 1)")


@pytest.fixture
def java(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", "/opt/java")


def test_the_archive_takes_its_name_once_a_driver_maps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, java: None
) -> None:
    driver = Driver()
    monkeypatch.setattr(classarchives, "_run_workload", driver)
    archive = tmp_path / "spark.jsa"
    assert classarchives.dump(archive) == len(b"classes")
    assert archive.read_bytes() == b"classes"
    assert [p.name for p in tmp_path.iterdir()] == ["spark.jsa"]
    dumped, checked = driver.options
    assert f"-XX:ArchiveClassesAtExit={archive}.partial" in dumped
    assert checked.startswith(classarchives.submit_options(Path(f"{archive}.partial")))


def test_an_archive_no_driver_maps_is_removed_and_the_old_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, java: None
) -> None:
    monkeypatch.setattr(classarchives, "_run_workload", Driver(written=b"damaged", maps=False))
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"the old one")
    with pytest.raises(errors.ConfigurationError, match="could not start from the class-data"):
        classarchives.dump(archive)
    assert [p.name for p in tmp_path.iterdir()] == ["spark.jsa"]
    assert archive.read_bytes() == b"the old one"


def test_a_jvm_that_writes_no_archive_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, java: None
) -> None:
    monkeypatch.setattr(classarchives, "_run_workload", Driver(written=None))
    with pytest.raises(errors.ConfigurationError, match="wrote no class-data archive"):
        classarchives.dump(tmp_path / "spark.jsa")
    assert list(tmp_path.iterdir()) == []


def test_the_command_prints_what_to_give_the_drivers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    java: None,
) -> None:
    monkeypatch.setattr(classarchives, "_run_workload", Driver())
    archive = tmp_path / "spark.jsa"
    assert cli.main(["spark", "archive", str(archive)]) == 0
    out = capsys.readouterr().out
    assert f"SPARK_SUBMIT_OPTS='-XX:SharedArchiveFile={archive} " in out


def test_the_child_refuses_arguments_it_does_not_know(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert classarchives.main(["spark.jsa"]) == 2
    assert "usage:" in capsys.readouterr().err


class Child:
    """Stands in for `subprocess.run`: records the child's command and environment, and ends
    with ``returncode`` or past its timeout."""

    def __init__(self, *, returncode: int = 0, hangs: bool = False) -> None:
        self.returncode, self.hangs = returncode, hangs
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(
        self, argv: list[str], *, env: dict[str, str], timeout: float, **_: object
    ) -> subprocess.CompletedProcess[bytes]:
        self.calls.append((argv, env))
        if self.hangs:
            raise subprocess.TimeoutExpired(argv, timeout)
        return subprocess.CompletedProcess(argv, self.returncode)


def test_the_child_keeps_the_jars_it_is_given_and_starts_no_connect_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = Child()
    monkeypatch.setattr(classarchives.subprocess, "run", child)
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark-connect:15002")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:SharedArchiveFile=/old.jsa")
    classarchives._run_workload(str(tmp_path), "-Xshare:on", timeout=60.0)
    [(argv, env)] = child.calls
    assert argv[-2:] == [classarchives.WORKLOAD_FLAG, str(tmp_path)]
    assert env["SPARK_HOME"] == "/opt/spark"
    assert env["SPARK_SUBMIT_OPTS"] == "-Xshare:on"
    assert "SPARK_REMOTE" not in env


@pytest.mark.parametrize(
    ("child", "said"),
    [
        (Child(returncode=1), r"the Spark driver's run failed \(exit 1\)"),
        (Child(hangs=True), r"did not end within 60 s"),
    ],
)
def test_a_run_that_fails_or_hangs_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, child: Child, said: str
) -> None:
    monkeypatch.setattr(classarchives.subprocess, "run", child)
    with pytest.raises(errors.ConfigurationError, match=said):
        classarchives._run_workload(str(tmp_path), "-Xshare:on", timeout=60.0)
