"""Shared test configuration.

The tests are laid out by the layer they test (``planner``, ``contracts``, ``adapters``,
``handlers``, ``consumer``, ``spark``, ``install``, ``devstack``). Inside a layer, ``wire/``
holds the wire-level tests: they start the real components they need (Azurite, the Event Hubs
emulator, the local Kubernetes API, a SparkSession) on 127.0.0.1 ports. The markers follow
from the folders here, so that a test file never has to declare them:

- ``wire/`` anywhere: ``integration``;
- ``spark/``: ``spark``;
- ``devstack/chaos/``: ``chaos``, ``integration`` and ``slow``;
- ``e2e/``: ``cluster`` (skipped unless ``-m cluster`` selects it).

Fixtures live one topic a module in ``tests/support/fixtures/``; they are loaded here by file
name so that adding one needs no edit of this file. Shared helpers are in ``tests/support/``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import sparkarchive

HERE = Path(__file__).resolve().parent

pytest_plugins = sorted(
    f"tests.support.fixtures.{p.stem}"
    for p in (HERE / "support" / "fixtures").glob("*.py")
    if not p.name.startswith("_")
)

#: Folder name -> the markers every test below it carries.
FOLDER_MARKERS: dict[str, tuple[str, ...]] = {
    "wire": ("integration",),
    "spark": ("spark",),
    "chaos": ("chaos", "integration", "slow"),
    "e2e": ("cluster",),
}


def markers_for(path: Path) -> list[str]:
    """The markers a test file gets from the folders between ``tests/`` and it."""
    folders = path.resolve().relative_to(HERE).parts[:-1]
    found: list[str] = []
    for folder in folders:
        for marker in FOLDER_MARKERS.get(folder, ()):
            if marker not in found:
                found.append(marker)
    return found


def pytest_configure(config: pytest.Config) -> None:
    """Every local Spark driver the suite starts, here or in a child process, maps the class
    archive when there is one: it starts in half the time and CPU. Without one (a bare
    ``pytest`` before ``make install``), the drivers start as users' do."""
    archive = sparkarchive.INSTALLED
    if archive.is_file() and "SPARK_SUBMIT_OPTS" not in os.environ:
        os.environ["SPARK_SUBMIT_OPTS"] = sparkarchive.submit_options(archive)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wants_cluster = "cluster" in (config.getoption("-m") or "")
    skip_cluster = pytest.mark.skip(reason="needs a real cluster: run with -m cluster")
    for item in items:
        for marker in markers_for(Path(str(item.path))):
            item.add_marker(marker)
        if "cluster" in item.keywords and not wants_cluster:
            item.add_marker(skip_cluster)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile`` (``make test``), the files that start real components go to
    the workers first (`tests.support.scheduling`), so that the run does not end on them."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.support import scheduling

    return scheduling.HeavyFirstScheduling(config, log)
