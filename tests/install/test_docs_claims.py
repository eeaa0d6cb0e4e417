"""The manual's claims against the code: what a page names exists, and what it says the code
does, the code does.

`test_docs.py` holds the pages to the repository's paths and to the benchmark records. Here,
for every page of docs/ (the classes of claims that a drift breaks without anyone noticing):

- every `ehb` command line a page shows names commands that exist and flags of those commands,
  and a usage line's ``[--flag N]`` shows the flag's default;
- every file a page names in backticks (``handlers/cycles.py``, ``test_carry.py``) exists;
- every dotted name of the code a page names (``readbacks.ACK_CONFIRM_SECONDS``) exists, and a
  figure written beside a constant is its value;
- every metric a page names is exported, with the labels the page gives it;
- every condition or Event reason a page names is one the code can produce;
- every ``$ ehb plan`` transcript is what ``ehb plan`` prints today.

The claims of single pages (a figure one page takes from the code) are `test_docs_pages.py`'s.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import math
import os
import pkgutil
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest, parser

import eventhub_balancer
import eventhub_balancer_devstack
from eventhub_balancer import cli
from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import metrics as consumer_metrics
from eventhub_balancer.handlers import metrics as operator_metrics
from tests.support import paths

ROOT = paths.REPOSITORY
DOCS = ROOT / "docs"
PRODUCT = ROOT / "operator" / "eventhub_balancer"
#: Generated or installed trees: not the project's own files.
SKIPPED = {".venv", "node_modules", "site", "__pycache__", ".git", ".mypy_cache", ".hypothesis"}

#: A fenced code block, and an inline code span (which Markdown lets run over a line break).
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def page_ids(page: Path) -> str:
    return page.name


def prose(text: str) -> str:
    """A page without its fenced blocks."""
    return FENCE.sub("", text)


def spans(text: str) -> Iterator[str]:
    """The inline code of a page's prose, each span's whitespace made single spaces."""
    for match in SPAN.finditer(prose(text)):
        yield " ".join(match.group(1).split())


# -- ehb command lines --------------------------------------------------------------------------

PARSER = cli.build_parser()


def _commands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    for action in [*parser._actions, *PARSER._actions]:
        if flag in action.option_strings:
            return action
    return None


def command_lines(text: str) -> Iterator[str]:
    """The `ehb` command lines of a page: inline code that starts with ``ehb``, and the lines
    of its code blocks that do (after a ``$`` prompt or ``.venv/bin/``)."""
    for span in spans(text):
        if span.startswith("ehb "):
            yield span
    for block in FENCE.finditer(text):
        for line in block.group(1).splitlines():
            line = line.strip().removeprefix("$ ").removeprefix(".venv/bin/")
            if line.startswith("ehb "):
                yield line


def _words(line: str) -> list[str]:
    line = line.split("  #")[0].split(" # ")[0]
    # A usage line: '[--json]' is a flag, 'a\|b' alternatives (the first stands for them).
    line = re.sub(r"[\[\]]", " ", line.replace("\\|", "|"))
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split()


def command_problems(line: str) -> list[str]:
    """What in one `ehb` line is no command or no flag of its command."""
    words = _words(line)[1:]
    parser, path, problems = PARSER, ["ehb"], []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("|", ">", "<", "&&", "..."):
            break
        if word == "--":  # `ehb bench record NAME -- COMMAND`: the command is checked too
            rest = words[i + 1 :]
            if rest[:1] == ["ehb"]:
                problems += command_problems(shlex.join(rest))
            break
        if word.startswith("-") and word != "-":
            flag = word.split("=")[0]
            action = _option(parser, flag)
            if action is None and not re.fullmatch(r"-v+", flag):
                problems.append(f"{' '.join(path)}: no flag {flag}")
            elif action is not None and action.nargs != 0 and "=" not in word:
                i += 1  # the flag's value
        else:
            commands = _commands_of(parser)
            if commands:
                name = word.split("|")[0]
                if name in commands:
                    parser = commands[name]
                    path.append(name)
                else:  # a placeholder (NAME, <command>) ends what can be checked
                    if not (name.isupper() or name.startswith("<")):
                        problems.append(f"{' '.join(path)}: no command {name!r}")
                    break
        i += 1
    return problems


def test_the_command_checker_finds_what_is_not_there() -> None:
    assert command_problems("ehb plan --json x.json") == []
    assert command_problems("ehb --log-format json consume ...") == []
    assert command_problems("ehb plan --jsn") == ["ehb plan: no flag --jsn"]
    assert command_problems("ehb bench planer") == ["ehb bench: no command 'planer'"]
    assert command_problems("ehb bench record X -- ehb plan --nope") == ["ehb plan: no flag --nope"]


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_every_ehb_command_line_names_real_commands_and_flags(page: Path) -> None:
    offenders = [
        f"{line[:90]}: {problem}"
        for line in command_lines(page.read_text())
        for problem in command_problems(line)
    ]
    assert offenders == []


#: ``[--flag N]`` in a usage line: the flag's default, as the page shows it.
USAGE_DEFAULT = re.compile(r"\[(--[a-z-]+) ([0-9][0-9.]*)\]")
#: "`--other-pods N` (default 0)".
PROSE_DEFAULT = re.compile(r"`(--[a-z-]+)(?: [A-Z]+)?` \(default ([0-9][0-9.]*)\)")


def _parser_of(line: str) -> argparse.ArgumentParser:
    parser = PARSER
    for word in _words(line)[1:]:
        commands = _commands_of(parser)
        if word in commands:
            parser = commands[word]
    return parser


def _shows_default(action: argparse.Action, value: str) -> bool:
    default = action.default
    if default is not None and not isinstance(default, bool):
        with contextlib.suppress(TypeError, ValueError):
            return float(default) == float(value)
    # A default that depends on another flag is given in the help: "default 4, with --operator 32".
    return re.search(rf"\b{re.escape(value)}\b", action.help or "") is not None


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_the_defaults_a_page_shows_are_the_flags_defaults(page: Path) -> None:
    text = page.read_text()
    offenders = []
    for line in command_lines(text):
        parser = _parser_of(line)
        for flag, value in USAGE_DEFAULT.findall(line):
            action = _option(parser, flag)
            if action is not None and not _shows_default(action, value):
                offenders.append(f"{parser.prog} {flag}: shown {value}, default {action.default}")
    for match in PROSE_DEFAULT.finditer(" ".join(text.split())):
        # The command is the last `ehb ...` span before the flag.
        before = [s for s in spans(text[: text.find(match.group(1))]) if s.startswith("ehb ")]
        if not before:
            continue
        parser = _parser_of(before[-1])
        action = _option(parser, match.group(1))
        if action is not None and not _shows_default(action, match.group(2)):
            offenders.append(f"{parser.prog} {match.group(1)}: shown {match.group(2)}")
    assert offenders == []


# -- files named in backticks -------------------------------------------------------------------

#: A file name in backticks: a name with a suffix, alone or under folders.
FILE_NAME = re.compile(
    r"`((?:[\w.-]+/)*[\w-]+\.(?:py|yaml|yml|json|md|sh|go|toml|cfg|tpl|lua|txt))`"
)


def repository_files() -> set[str]:
    found: set[str] = set()
    for folder, folders, names in os.walk(ROOT):
        folders[:] = [f for f in folders if f not in SKIPPED and not f.endswith(".egg-info")]
        relative = Path(folder).relative_to(ROOT)
        found.update((relative / name).as_posix() for name in names)
    return found


FILES = repository_files()


def missing_file(name: str, files: set[str]) -> bool:
    """A name that is no file of the repository, as it stands or as the end of a path.
    Placeholders (``NAME.json``) and generated folders (``.images/``) are no claim."""
    stem = name.rsplit("/", 1)[-1].split(".")[0]
    if stem.isupper() and stem != "README":
        return False
    if name.startswith(".") and not (ROOT / name.split("/")[0]).exists():
        return False
    return not any(f == name or f.endswith("/" + name) for f in files)


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_every_file_a_page_names_exists(page: Path) -> None:
    named = {m.group(1) for m in FILE_NAME.finditer(page.read_text())}
    assert sorted(n for n in named if missing_file(n, FILES)) == []


# -- dotted names of the code -------------------------------------------------------------------


def _modules() -> dict[str, list[str]]:
    """Each module of the product and the development stack by its last name."""
    found: dict[str, list[str]] = {}
    for package in (eventhub_balancer, eventhub_balancer_devstack):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            found.setdefault(info.name.rsplit(".", 1)[1], []).append(info.name)
    return found


MODULES = _modules()
#: First parts that name something else as often as a module: the CR's fields (`status.x`,
#: `spec.x`), Spark's and the chart's settings (`spark.x`, `metrics.x`, `values.yaml`), kopf's.
NOT_CODE = {
    "status",
    "spec",
    "spark",
    "metrics",
    "consumer",
    "settings",
    "runtime",
    "values",
    "resources",
}
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)`")


def _lookup(module: ModuleType, attributes: list[str]) -> bool:
    owner: Any = module
    for attribute in attributes:
        fields = getattr(owner, "__dataclass_fields__", None) or {}
        annotations = getattr(owner, "__annotations__", None) or {}
        if attribute in fields or attribute in annotations:
            return True  # a field of a dataclass or a TypedDict: no value to go further into
        if not hasattr(owner, attribute):
            return False
        owner = getattr(owner, attribute)
    return True


def resolve(name: str) -> bool | None:
    """Whether ``name`` (``readbacks.ACK_CONFIRM_SECONDS``) is a name of the code; None when its
    first part is no module of ours, or a file name, so that it makes no claim about the code."""
    parts = name.split(".")
    if parts[-1] in ("py", "md", "json", "yaml", "log") or parts[0] in NOT_CODE:
        return None
    if name == cli.ENTRY_POINT_GROUP:
        return True
    candidates: list[tuple[str, list[str]]] = []
    for cut in range(len(parts), 0, -1):
        head, rest = parts[:cut], parts[cut:]
        if parts[0] in ("eventhub_balancer", "eventhub_balancer_devstack"):
            candidates.append((".".join(head), rest))
        else:
            for module in MODULES.get(parts[0], []):
                candidates.append((".".join([module, *head[1:]]), rest))
    if not candidates:
        return None
    for module_name, rest in candidates:
        try:
            imported = importlib.import_module(module_name)
        except ImportError:
            continue
        if _lookup(imported, rest):
            return True
    return False


def code_names(text: str) -> set[str]:
    return {m.group(1) for m in DOTTED.finditer(text)}


def test_the_name_resolver_tells_names_of_the_code() -> None:
    assert resolve("readbacks.ACK_CONFIRM_SECONDS") is True
    assert resolve("observations.Departures.confirmed") is True
    assert resolve("readbacks.ACK_CONFIRM_SECOND") is False
    assert resolve("status.epochs") is None
    assert resolve("deciding.py") is None


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_every_name_of_the_code_a_page_names_exists(page: Path) -> None:
    assert sorted(n for n in code_names(page.read_text()) if resolve(n) is False) == []


#: A figure in seconds right before a constant: "within 3 s (`readbacks.ACK_CONFIRM_SECONDS`)",
#: or right after it: "(`deadlines.AHEAD_SECONDS`, 10 s)".
FIGURE_BEFORE = re.compile(r"([0-9][0-9,.]*) (s|ms|seconds|minutes)\b[^.`0-9]{0,80}?\(`([\w.]+)`")
FIGURE_AFTER = re.compile(r"\(`([\w.]+)`, ([0-9][0-9,.]*) (s|ms|seconds|minutes)\b")
UNIT = {"s": 1.0, "seconds": 1.0, "ms": 0.001, "minutes": 60.0}


def constant(name: str) -> float | None:
    """The numeric value of a constant of the code (``relisting.RELIST_SECONDS``), else None."""
    parts = name.split(".")
    if not parts[-1].isupper() or resolve(name) is not True:
        return None
    for module_name in MODULES.get(parts[0], []):
        owner: Any = importlib.import_module(module_name)
        with contextlib.suppress(AttributeError):
            for attribute in parts[1:]:
                owner = getattr(owner, attribute)
            if isinstance(owner, int | float):
                return float(owner)
    return None


def figures_beside_constants(text: str) -> Iterator[tuple[str, float]]:
    text = " ".join(prose(text).split())
    for match in FIGURE_BEFORE.finditer(text):
        yield match.group(3), float(match.group(1).replace(",", "")) * UNIT[match.group(2)]
    for match in FIGURE_AFTER.finditer(text):
        yield match.group(1), float(match.group(2).replace(",", "")) * UNIT[match.group(3)]


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_a_figure_written_beside_a_constant_is_its_value(page: Path) -> None:
    offenders = []
    for name, figure in figures_beside_constants(page.read_text()):
        value = constant(name)
        if value is not None and not math.isclose(value, figure):
            offenders.append(f"{name}: the page says {figure:g} s, the code {value:g} s")
    assert offenders == []


def test_figures_beside_constants_are_found_on_either_side() -> None:
    text = (
        "within 3 s (`readbacks.ACK_CONFIRM_SECONDS`), 75 s, far beyond its 5 s wait "
        "(`rosters.ECHO_SECONDS`), a listing stands (`deadlines.AHEAD_SECONDS`, 10 s)."
    )
    assert list(figures_beside_constants(text)) == [
        ("readbacks.ACK_CONFIRM_SECONDS", 3.0),
        ("rosters.ECHO_SECONDS", 5.0),
        ("deadlines.AHEAD_SECONDS", 10.0),
    ]


# -- metrics ------------------------------------------------------------------------------------

METRIC = re.compile(r"\b(ehb_[a-z0-9_]*[a-z0-9_])(\{[^}]*\})?")
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("", "_bucket", "_count", "_sum"),
    "info": ("_info",),
}


def exported_metrics() -> dict[str, set[str]]:
    """Every metric the operator and a consumer pod export, by name, with its label names."""
    exported: dict[str, set[str]] = {}
    operator = operator_metrics.Metrics()
    for wrapper in vars(operator).values():
        if hasattr(wrapper, "_labelnames") and hasattr(wrapper, "_type"):
            for suffix in SUFFIXES.get(wrapper._type, ("",)):
                exported[wrapper._name + suffix] = set(wrapper._labelnames)
    for family in parser.text_string_to_metric_families(
        generate_latest(operator.registry).decode()
    ):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    stats = {
        "0": consumer_metrics.PartitionStats(
            owned=True,
            processed_sequence_number=1,
            checkpoint_time=1.0,
            last_enqueued=deliveries.LastEnqueued(
                sequence_number=2, offset="2", enqueued_time=None, retrieved_time=None
            ),
        )
    }
    registry: CollectorRegistry = consumer_metrics.registry_for(
        lambda: stats,
        triggers=consumer_metrics.TriggerStats(last_seconds=1.0),
        refusals=lambda: {"name": 1},
    )
    for family in parser.text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    return exported


EXPORTED = exported_metrics()


def metric_problems(text: str, *, other_names: frozenset[str] = frozenset()) -> list[str]:
    """What a text names as metrics that no metric is; ``other_names`` are the product's other
    ``ehb_`` names (a kopf index), which are no claim of a metric."""
    problems = []
    for match in METRIC.finditer(text):
        name, labels = match.group(1), match.group(2)
        if name.endswith("_") or name == "ehb_consumer":  # a prefix: "every ehb_consumer_*"
            if not any(n.startswith(name) for n in EXPORTED):
                problems.append(f"no metric starts with {name}")
            continue
        if name not in EXPORTED:
            if name in other_names:
                continue
            problems.append(f"{name} is not exported")
            continue
        for label in re.findall(r"([a-z_]+)\s*(?:=|,|\}|$)", (labels or "").strip("{}") + "}"):
            if label not in EXPORTED[name]:
                problems.append(f"{name} has no label {label}")
    return problems


def test_the_metric_checker_finds_names_and_labels_not_exported() -> None:
    assert metric_problems("`ehb_moves_total{kind,reason}` and `ehb_build_info`") == []
    assert metric_problems("`ehb_ready{namespace, consumer, reason}`") == []
    assert metric_problems("`ehb_moves_total{kind,pod}`, `ehb_nothing`") == [
        "ehb_moves_total has no label pod",
        "ehb_nothing is not exported",
    ]


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_every_metric_a_page_names_is_exported_with_its_labels(page: Path) -> None:
    others = frozenset(s for s in PRODUCT_STRINGS if METRIC.fullmatch(s))
    assert metric_problems(page.read_text(), other_names=others) == []


# -- condition and Event reasons ----------------------------------------------------------------


def product_strings() -> set[str]:
    """Every string constant of the product: a reason the code can produce is one of them."""
    found: set[str] = set()
    for path in PRODUCT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


PRODUCT_STRINGS = product_strings()
#: "reason `X`", "Event `X`", "reasons `X`, `Y` or `Z`".
REASON = re.compile(
    r"\b(?:[Rr]easons?|Events?)\s+(?:is\s+|of\s+)?`([A-Z][A-Za-z]+)`"
    r"((?:\s*(?:,|or|and|, or|, and)\s*`[A-Z][A-Za-z]+`)*)"
)
CAMEL = re.compile(r"`([A-Z][a-z]+(?:[A-Z][a-z0-9]*)+)`")


def named_reasons(text: str) -> set[str]:
    """The reasons a page names: after the word reason or Event, and in the column of a table
    whose header is "reason" or "reasons"."""
    found: set[str] = set()
    flat = " ".join(prose(text).split())
    for match in REASON.finditer(flat):
        found.add(match.group(1))
        found.update(re.findall(r"`([A-Z][A-Za-z]+)`", match.group(2)))
    column: int | None = None
    for line in prose(text).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|"):
            column = None
        elif column is None:
            column = next((i for i, c in enumerate(cells) if c in ("reason", "reasons")), None)
        elif column < len(cells):
            found.update(CAMEL.findall(cells[column]))
    return found


def test_reasons_are_found_after_their_word_and_in_their_column() -> None:
    text = (
        "False with reason `NoPods`; Event `Conflict`; reasons `Ab`, `BeeCee` or `De`.\n\n"
        "| condition | reasons |\n| --- | --- |\n| Ready | `AllPartitionsOwned`, `NoPods` |\n"
    )
    assert named_reasons(text) == {"NoPods", "Conflict", "Ab", "BeeCee", "De", "AllPartitionsOwned"}


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_every_reason_a_page_names_is_one_the_code_produces(page: Path) -> None:
    assert sorted(r for r in named_reasons(page.read_text()) if r not in PRODUCT_STRINGS) == []


# -- ehb plan transcripts -----------------------------------------------------------------------


def plan_transcripts(text: str) -> Iterator[tuple[str, str]]:
    """Each ``$ ehb plan ARGS`` of a code block with the lines it shows up to the next prompt."""
    for block in FENCE.finditer(text):
        lines = block.group(1).splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("$ ehb plan ") or "|" in line:
                continue
            shown = []
            for following in lines[i + 1 :]:
                if following.startswith("$ "):
                    break
                shown.append(following)
            yield line.removeprefix("$ ehb plan "), "\n".join(shown).rstrip()


def printed_plan(arguments: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    with contextlib.chdir(ROOT):
        status = cli.main(["plan", *shlex.split(arguments)])
    assert status == 0
    return capsys.readouterr().out.rstrip()


@pytest.mark.parametrize("page", pages(), ids=page_ids)
def test_every_ehb_plan_transcript_is_what_ehb_plan_prints(
    page: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for arguments, shown in plan_transcripts(page.read_text()):
        assert printed_plan(arguments, capsys) == shown, f"ehb plan {arguments}"
