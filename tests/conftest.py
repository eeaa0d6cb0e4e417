"""Shared test configuration.

Fixture plugins live one per topic in ``tests/plugins/`` (the local stack's components,
fakes); they are loaded here by file name so that adding one needs no edit of this file.
"""

from pathlib import Path

pytest_plugins = sorted(
    f"tests.plugins.{p.stem}"
    for p in (Path(__file__).parent / "plugins").glob("*.py")
    if not p.name.startswith("_")
)
