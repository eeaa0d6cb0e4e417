"""The quick start on the site's front page and the README's "Two commands" name the same
tools: every one that ``make install`` checks for. A reader of docs/index.md alone met Go and
promtool only when ``make`` stopped on them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What `make install` checks for, as the pages name it (Makefile: the venv, npm,
#: java-check, controlplane, promtool-check).
TOOLS = ("Python 3.11+", "Node.js", "Java 17+", "Go 1.26+", "promtool")


def section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else None]


@pytest.mark.parametrize(
    ("page", "heading"), [("README.md", "## Two commands"), ("docs/index.md", "## Quick start")]
)
def test_the_quick_start_names_every_tool_make_install_checks_for(page: str, heading: str) -> None:
    text = " ".join(section(ROOT / page, heading).split())
    missing = [tool for tool in TOOLS if tool not in text]
    assert not missing, f"{page} ({heading}) does not name {missing}"
    assert all(
        target in (ROOT / "Makefile").read_text()
        for target in ("java-check:", "controlplane:", "promtool-check:")
    )
