"""The product's wheel holds only the product, and a plain install runs the operator and the
consumer: the images install ``pip install .`` and nothing else.

The plain install takes the wheel's dependencies from this venv, not from the index: the
distributions its ``Requires-Dist`` names (and theirs, with the extras asked for) are linked into
an empty venv, and pip installs the wheel there with ``--no-index``, so that pip itself checks
that they satisfy it, and ``pip check`` that nothing installed lacks one. Resolving them from the
index cost 40 to 75 s of the suite, most of it fetching and reading index pages.

The development stack (``devstack/``, its own distribution) and the test-only libraries must
not leak into it: no emulator, fake API, kubelet, scenario, chaos or benchmark code, and no
import of kmock, looptime or the SDK's blob checkpoint store.
"""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
#: Bounds on the pip runs: building the wheel is quick; the plain install reads no index.
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 120


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


def _closure(requires: list[str]) -> set[str]:
    """The distributions of this venv that ``requires`` (``Requires-Dist`` lines, no extra of
    the product's own) needs, with theirs, with the extras each requirement asks for."""
    seen: set[tuple[str, str]] = set()
    todo = [(line, "") for line in requires]
    while todo:
        line, extra = todo.pop()
        requirement = Requirement(line)
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        for wanted in ("", *requirement.extras):
            if (name, wanted) not in seen:
                seen.add((name, wanted))
                own = importlib.metadata.distribution(name).requires or ()
                todo += [(dep, wanted) for dep in own]
    return {name for name, _ in seen}


def _link_distributions(names: set[str], site_packages: Path) -> None:
    """Each distribution's files (as its RECORD lists them) under this venv's site-packages
    linked into ``site_packages``; its scripts are left out."""
    for name in names:
        dist = importlib.metadata.distribution(name)
        root = Path(str(dist.locate_file(""))).resolve()
        assert dist.files, f"{name}: no RECORD to copy it by"
        for file in dist.files:
            source = Path(str(dist.locate_file(file))).resolve()
            if not source.is_relative_to(root) or not source.is_file():
                continue
            target = site_packages / source.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)


@pytest.mark.slow
def test_a_plain_install_runs_the_operator_and_the_consumer(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "plain"
    venv.create(env_dir)
    python = env_dir / "bin" / "python"
    (site_packages,) = (env_dir / "lib").glob("python3*/site-packages")
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    requires = (
        email.parser.Parser().parsestr(archive.read(metadata).decode()).get_all("Requires-Dist", [])
    )
    _link_distributions(_closure(requires), site_packages)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    for args in (["install", "--quiet", "--no-index", str(wheel)], ["check"]):
        subprocess.run([*pip, *args], check=True, timeout=INSTALL_TIMEOUT_S)
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
