"""The manual against the repository: no page, README or comment points at a missing file.

The docs site's own build (`mkdocs build --strict` in ``make test``) checks the links between
its pages. What it cannot see is checked here: repository paths named in the pages, in the
READMEs and in the code's comments and docstrings (they go stale when files move), the
hand-off tables that docs/architecture.md copies from `eventhub_balancer.handoffs`, and the
README's figures, which must be those rendered from the benchmark records.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhub_balancer import handoffs
from eventhub_balancer_devstack.benchmarks import records, recordviews, servercomparisons
from tests.support import paths

ROOT = paths.REPOSITORY
DOCS = ROOT / "docs"

#: The folders whose code comments and docstrings may name repository paths.
CODE_FOLDERS = ("operator", "devstack", "tests", "charts", "manifests", "docker", "examples")
#: Generated or installed trees: not the project's own words.
SKIPPED = {".venv", "node_modules", "site", "__pycache__", ".git", ".mypy_cache", ".hypothesis"}

#: A repository path: a top-level folder of the project, then a path. Not part of a longer
#: path or URL (the look-behind), and not a template or glob (checked below).
PATH = re.compile(
    r"(?<![\w./=-])((?:docs|tests|operator/eventhub_balancer|devstack|charts|manifests|docker"
    r"|examples|crds)(?:/[\w.-]+)*/?)"
)
#: Places that are not in the repository and never will be.
FORBIDDEN = re.compile(r"\.readme/|DESIGN\.md|\.\./shared|shared/[A-Z_]+\.md")
#: What a named path or a forbidden place holds, anywhere in a Python file. Comments and
#: docstrings are parts of the source, so a file without any of these names none in its prose,
#: and is not tokenized (tokenizing every file took 8 s of the 10 s these checks take).
MENTION = re.compile(
    r"(?:docs|tests|operator/eventhub_balancer|devstack|charts|manifests|docker|examples|crds)/"
    r"|" + FORBIDDEN.pattern
)
#: A relative Markdown link, e.g. ``[x](docs/planner.md#a)``.
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)(?:#[^)]*)?\)")


def _files(folder: Path, *suffixes: str) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIPPED or any(p.endswith(".egg-info") for p in parts) or not path.is_file():
            continue
        if path.suffix in suffixes or path.name in suffixes:
            yield path


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *_files(DOCS, ".md")] + [
        p for f in CODE_FOLDERS for p in _files(ROOT / f, ".md")
    ]


def python_prose(source: str) -> str:
    """The comments and docstrings of a Python file: the prose, not the code."""
    found: list[str] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []
    found += [t.string for t in tokens if t.type == tokenize.COMMENT]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "\n".join(found)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                found.append(docstring)
    return "\n".join(found)


def hash_comments(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.lstrip().startswith("#"))


@functools.cache
def prose_files() -> tuple[tuple[Path, str], ...]:
    """Every text whose paths must exist: pages and READMEs whole, code by its comments (read
    once for the checks that use it)."""
    return tuple(_prose_files())


def _prose_files() -> Iterator[tuple[Path, str]]:
    for path in markdown_files():
        yield path, path.read_text()
    for folder in CODE_FOLDERS:
        for path in _files(ROOT / folder, ".py"):
            source = path.read_text()
            if MENTION.search(source):
                yield path, python_prose(source)
        for path in _files(ROOT / folder, ".yaml", ".yml", ".toml", "Dockerfile", ".cfg"):
            yield path, hash_comments(path.read_text())
        for path in _files(ROOT / folder, ".Dockerfile"):
            yield path, hash_comments(path.read_text())
    for name in ("Makefile", "mkdocs.yml", "pyproject.toml", ".importlinter", ".gitignore"):
        if (ROOT / name).exists():
            yield ROOT / name, hash_comments((ROOT / name).read_text())


def is_placeholder(path: str) -> bool:
    """A name in capitals (``NAME.json``), a glob or a template: not a file."""
    if any(c in path for c in "*<>{}$"):  # a glob or a template goes on after the match
        return True
    return any(
        part.split(".")[0].isupper() and part.split(".")[0] != "README" for part in path.split("/")
    )


def missing_paths(text: str, *, folder: Path = ROOT) -> list[str]:
    """The paths named in ``text`` that exist neither from the root nor from ``folder``."""
    missing = []
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        following = text[match.end(1) : match.end(1) + 1]
        if "/" not in path or is_placeholder(path + following):
            continue
        if (ROOT / path).exists() or (folder / path).exists():
            continue
        missing.append(path)
    return missing


def test_path_scanner_finds_paths_and_skips_placeholders() -> None:
    text = (
        "see docs/nowhere.md and `tests/planner/scenarios/`, docs/benchmarks/NAME.json, "
        "https://example.com/docs/x.md, tests/*/wire/, tests/nowhere/*.py, docs/planner.md, "
        "the operator/pod contract and syntax=docker/dockerfile:1."
    )
    assert missing_paths(text) == ["docs/nowhere.md"]
    assert python_prose('"""Doc docs/a.md."""\nx = "docs/b.md"  # docs/c.md\n') == (
        "# docs/c.md\nDoc docs/a.md."
    )


def test_every_named_repository_path_exists() -> None:
    offenders = [
        f"{source.relative_to(ROOT)}: {path}"
        for source, text in prose_files()
        for path in missing_paths(text, folder=source.parent)
    ]
    assert offenders == []


def test_nothing_points_outside_the_repository() -> None:
    offenders = [
        f"{source.relative_to(ROOT)}: {match.group(0)}"
        for source, text in prose_files()
        for match in FORBIDDEN.finditer(text)
    ]
    assert offenders == []


def test_markdown_links_outside_the_site_resolve() -> None:
    # Pages inside docs/ are checked by mkdocs --strict; the READMEs are not part of the site.
    offenders = []
    for path in markdown_files():
        if DOCS in path.parents:
            continue
        for match in LINK.finditer(path.read_text()):
            if not (path.parent / match.group(1)).exists():
                offenders.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert offenders == []


def test_the_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_the_readme_figures_are_those_of_the_records() -> None:
    readme = (ROOT / "README.md").read_text()
    assert records.BLOCK.search(readme), "the README shows no recorded figures"
    assert records.refresh(readme, directory=DOCS / "benchmarks") == readme, (
        "the README's figures differ from docs/benchmarks/: run make figures"
    )


@pytest.mark.parametrize(
    "record", sorted((DOCS / "benchmarks").glob("*.json")), ids=lambda p: p.stem
)
def test_every_record_reads_and_renders(record: Path) -> None:
    loaded = records.read(record.stem, directory=record.parent)
    assert loaded.benchmark == record.stem
    assert "load average" in records.render(loaded)


def test_every_marker_names_a_record() -> None:
    names = {
        m["name"] for page in markdown_files() for m in records.MARKER.finditer(page.read_text())
    }
    assert names, "no page shows recorded figures"

    def recorded(name: str) -> bool:
        if name == servercomparisons.MARKER:  # the servers side by side: real-*.json
            return any((DOCS / "benchmarks").glob(f"{records.REAL_PREFIX}*.json"))
        if name in records.SERIES:  # a series: NAME-*.json, rendered as one table
            return any((DOCS / "benchmarks").glob(f"{name}-*.json"))
        if name in recordviews.ASPECTS:  # another view of a record: NAME-stages of NAME.json
            name = recordviews.ASPECTS[name][0]
        return (DOCS / "benchmarks" / f"{name}.json").exists()

    assert sorted(n for n in names if not recorded(n)) == []


# -- the architecture page draws eventhub_balancer.handoffs -------------------------------------


def _code(value: object) -> str:
    return f"`{value}`"


def fates_table() -> list[str]:
    lines = [
        "| partition state | " + " | ".join(f"owner `{s}`" for s in handoffs.STANDINGS) + " |",
        "| --- |" + " --- |" * len(handoffs.STANDINGS),
    ]
    for state in handoffs.PARTITION_STATES:
        cells = []
        for standing in handoffs.STANDINGS:
            fate, reason = handoffs.FATES[state, standing]
            cells.append(f"`{fate}` ({reason})" if reason else _code(fate))
        lines.append(f"| `{state}` | " + " | ".join(cells) + " |")
    return lines


def epoch_table() -> list[str]:
    return [
        "| fate | " + " | ".join(_code(f) for f in handoffs.EPOCH_STEP) + " |",
        "| --- |" + " ---: |" * len(handoffs.EPOCH_STEP),
        "| epoch + | " + " | ".join(str(v) for v in handoffs.EPOCH_STEP.values()) + " |",
    ]


def worker_table() -> list[str]:
    lines = [
        "| worker state | " + " | ".join(_code(e) for e in handoffs.WORKER_EVENTS) + " |",
        "| --- |" + " --- |" * len(handoffs.WORKER_EVENTS),
    ]
    for state in handoffs.WORKER_STATES:
        cells = [
            _code(handoffs.WORKER_TRANSITIONS[state, event])
            if (state, event) in handoffs.WORKER_TRANSITIONS
            else "-"
            for event in handoffs.WORKER_EVENTS
        ]
        lines.append(f"| `{state}` | " + " | ".join(cells) + " |")
    return lines


@pytest.mark.parametrize("table", [fates_table, epoch_table, worker_table])
def test_the_architecture_page_shows_the_handoff_tables(table: object) -> None:
    assert callable(table)
    expected = "\n".join(table())
    assert expected in (DOCS / "architecture.md").read_text()
