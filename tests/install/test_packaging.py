"""The product's wheel holds only the product, and a plain install runs the operator and the
consumer: the images install ``pip install .`` and nothing else.

The development stack (``devstack/``, its own distribution) and the test-only libraries must
not leak into it: no emulator, fake API, kubelet, scenario, chaos or benchmark code, and no
import of kmock, looptime or the SDK's blob checkpoint store.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support import paths

#: Imports the product must never make (the devstack and test-only libraries).
FORBIDDEN_IMPORTS = (
    "eventhub_balancer_devstack",
    "kmock",
    "looptime",
    "azure.eventhub.extensions.checkpointstoreblobaio",
    "pytest",
    "hypothesis",
)
#: Bounds on the pip runs: building the wheel is quick; a plain install fetches the product's
#: dependencies (from pip's cache after ``make test`` installed them).
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), "."],
        cwd=paths.REPOSITORY,
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    (built,) = out.glob("eventhub_balancer-*.whl")
    return built


def _imports(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_the_wheel_holds_only_the_product(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"eventhub_balancer", wheel.name.split("-py")[0] + ".dist-info"}
    dev_parts = ("/local/", "/benchmarks/", "devstack", "emulator", "kubelet", "chaos")
    assert [n for n in names if any(part in n for part in dev_parts)] == []


def test_nothing_in_the_wheel_imports_development_libraries(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    offenders = []
    for name in archive.namelist():
        if not name.endswith(".py"):
            continue
        for module in _imports(archive.read(name).decode()):
            if any(module == f or module.startswith(f + ".") for f in FORBIDDEN_IMPORTS):
                offenders.append(f"{name}: {module}")
    assert offenders == []


@pytest.mark.slow
def test_a_plain_install_runs_the_operator_and_the_consumer(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "plain"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    ehb = env_dir / "bin" / "ehb"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for command in (["operator", "--help"], ["consume", "--help"]):
        done = subprocess.run(
            [str(ehb), *command], capture_output=True, text=True, env=clean, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "usage: ehb" in done.stdout
    listing = subprocess.run(
        [str(ehb), "--help"], capture_output=True, text=True, env=clean, timeout=60, check=True
    ).stdout
    assert "operator" in listing
    assert "consume" in listing
    # Without the devstack there are no development commands.
    assert "bench" not in listing
    assert "demo" not in listing
    missing = subprocess.run(
        [str(python), "-c", "import kmock"], capture_output=True, env=clean, timeout=60
    )
    assert missing.returncode != 0
