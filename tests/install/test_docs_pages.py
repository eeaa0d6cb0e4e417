"""The claims of single pages that follow a value of the code or the records.

`test_docs_claims.py` checks classes of claims on every page (commands, flags, files, names,
metrics, reasons); here each claim is checked where one page states it, so that a change of
the code that makes it false fails here: a figure a page takes from a constant, the file
count of a pod deletion's path, the private library names a user depends on, the known limits
the status page lists.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from eventhub_balancer.adapters import (
    checkpointing,
    checkpointrequests,
    hubclients,
    linkrepairs,
    receiving,
    retrying,
)
from eventhub_balancer.balancing import models, scenarios
from eventhub_balancer.consumer import restarts
from eventhub_balancer.handlers import backlogs, growth, kopfwiring
from eventhub_balancer.handlers.cache import relisting, rosters, serving
from eventhub_balancer.reconciling import deadlines, readbacks
from eventhub_balancer_devstack import chaosfaults
from tests.support import paths

ROOT = paths.REPOSITORY
DOCS = ROOT / "docs"
PRODUCT = ROOT / "operator" / "eventhub_balancer"


# -- private names of the libraries -------------------------------------------------------------

#: The standard library's (`os`, `argparse`: its subparsers and its list of actions, asyncio's
#: stream reader), not a dependency's.
STANDARD = {"_exit", "_SubParsersAction", "_actions", "_eof"}


def private_library_names() -> dict[str, set[str]]:
    """The private names (``_open``) the product reads or sets on objects that are not its own,
    by the files that do: names its own code does not define."""
    own: set[str] = set()
    used: dict[str, set[str]] = {}
    for path in PRODUCT.rglob("*.py"):
        relative = path.relative_to(PRODUCT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.keyword) and node.arg:
                own.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
            if isinstance(node, ast.Attribute):
                value = node.value
                if isinstance(value, ast.Name) and value.id in ("self", "cls"):
                    if isinstance(node.ctx, ast.Store):
                        own.add(node.attr)
                    continue
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name = node.args[1].value
            else:
                continue
            if name.startswith("_") and not name.startswith("__"):
                used.setdefault(name, set()).add(relative)
    return {n: files for n, files in used.items() if n not in own and n not in STANDARD}


def test_the_status_page_names_every_private_library_name_the_product_uses() -> None:
    """A private name of a library moves without notice in any release: the status page is
    where a user weighs that, so it names each one."""
    status = (DOCS / "status.md").read_text()
    named = {m.group(1).rsplit(".", 1)[-1] for m in re.finditer(r"`([\w.]+)`", status)}
    unnamed = {
        name: sorted(files) for name, files in private_library_names().items() if name not in named
    }
    assert unnamed == {}


# -- single pages -------------------------------------------------------------------------------


def page_text(name: str) -> str:
    return " ".join((DOCS / name).read_text().split())


def figure(text: str, pattern: str) -> float:
    match = re.search(pattern, text)
    assert match, f"the page no longer says {pattern!r}"
    return float(match.group(1).replace(",", ""))


#: (page, what it says, as a pattern whose group is the figure, the value in the code).
CODE_FIGURES: list[tuple[str, str, Callable[[], float]]] = [
    # architecture.md
    ("architecture.md", r"within ([0-9.]+) s \(`readbacks", lambda: readbacks.ACK_CONFIRM_SECONDS),
    (
        "architecture.md",
        r"Every ([0-9]+) s each namespace's pods are listed afresh",
        lambda: relisting.RELIST_SECONDS,
    ),
    (
        "architecture.md",
        r"when a write is not echoed within ([0-9]+) s",
        lambda: rosters.ECHO_SECONDS,
    ),
    ("architecture.md", r"if it is at most ([0-9]+) s old", lambda: deadlines.AHEAD_SECONDS),
    (
        "architecture.md",
        r"For its first ([0-9]+) s \(`releaseWaitSeconds`",
        lambda: models.Options().release_wait_seconds,
    ),
    (
        "architecture.md",
        r"cancels the receive again every ([0-9]+) ms",
        lambda: linkrepairs.RECANCEL_S * 1000,
    ),
    (
        "architecture.md",
        r"until it ends \(at most ([0-9]+) s\)",
        lambda: linkrepairs.CLOSE_TIMEOUT_S,
    ),
    # checkpoints.md
    ("checkpoints.md", r"under a ([0-9]+) s blob lease", lambda: checkpointrequests.LEASE_SECONDS),
    (
        "checkpoints.md",
        r"a lease still held after ([0-9.]+) s",
        lambda: checkpointing.LEASE_BREAK_AFTER_S,
    ),
    (
        "checkpoints.md",
        r"budget of time \(default ([0-9]+) s",
        lambda: retrying.DEFAULT_POLICY.budget_seconds,
    ),
    (
        "checkpoints.md",
        r"default [0-9]+ s, ([0-9]+) s per request",
        lambda: retrying.DEFAULT_POLICY.attempt_timeout_seconds,
    ),
    ("checkpoints.md", r"at most ([0-9]+) requests\)", lambda: retrying.DEFAULT_POLICY.attempts),
    (
        "checkpoints.md",
        r"whose pauses start at ([0-9]+) ms",
        lambda: retrying.CONFLICT_DELAY_S * 1000,
    ),
    (
        "checkpoints.md",
        r"start at [0-9]+ ms and double up to ([0-9]+) s",
        lambda: retrying.DEFAULT_POLICY.max_delay_seconds,
    ),
    (
        "checkpoints.md",
        r"That read may take up to ([0-9]+) s",
        lambda: receiving.LINK_OPEN_TIMEOUT_S + 5.0,
    ),
    (
        "checkpoints.md",
        r"the receive link's own ([0-9]+) s bound on opening",
        lambda: receiving.LINK_OPEN_TIMEOUT_S,
    ),
    (
        "checkpoints.md",
        r"after its backoff \(([0-9]+) s, doubling",
        lambda: restarts.RESTART_BACKOFF_S,
    ),
    ("checkpoints.md", r"doubling up to ([0-9]+) s\)", lambda: restarts.RESTART_BACKOFF_MAX_S),
    # planner.md
    (
        "planner.md",
        r"`lagTolerance` \(t, default `([0-9.]+)`",
        lambda: models.DEFAULT_LAG_TOLERANCE,
    ),
    (
        "planner.md",
        r"`lagTolerance` \(t, default `[0-9.]+`, from 0 to ([0-9]+)\)",
        lambda: models.MAX_LAG_TOLERANCE,
    ),
    (
        "planner.md",
        r"for `releaseWaitSeconds` \(([0-9]+) s\)",
        lambda: models.Options().release_wait_seconds,
    ),
    (
        "planner.md",
        r"A fresh start takes from 0 to ([0-9,]+) partitions",
        lambda: scenarios.FRESH_LIMIT,
    ),
    # scale.md
    (
        "scale.md",
        r"at most ([0-9]+) calls to Event Hubs and the stores in flight",
        lambda: hubclients.CONCURRENT_CALLS,
    ),
    ("scale.md", r"against a call's ([0-9]+) s", lambda: hubclients.TIMEOUT_SECONDS),
    ("scale.md", r"at most ([0-9,]+) of each", lambda: hubclients.CLIENTS_KEPT),
    (
        "scale.md",
        r"the probes share ([0-9]+) partition reads a second",
        lambda: backlogs.READS_PER_SECOND,
    ),
    (
        "scale.md",
        r"the checkpoint store's probe \(once a (minute)\)",
        lambda: deadlines.CHECKPOINT_PROBE_SECONDS,
    ),
    (
        "scale.md",
        r"values are kept until a dependency rejects what they hold, and for at most "
        r"([0-9]+) minutes",
        lambda: serving.REFRESH_SECONDS / 60,
    ),
    (
        "scale.md",
        r"the pods of each namespace listed afresh every ([0-9]+) s",
        lambda: relisting.RELIST_SECONDS,
    ),
    # status.md
    (
        "status.md",
        r"a stalled stream is reconnected after ([0-9]+) s of silence",
        lambda: kopfwiring.WATCH_INACTIVITY_SECONDS,
    ),
    ("status.md", r"a write not echoed within ([0-9]+) s", lambda: rosters.ECHO_SECONDS),
    (
        "status.md",
        r"each namespace's pods are listed afresh every ([0-9]+) s",
        lambda: relisting.RELIST_SECONDS,
    ),
    # benchmarks.md: the chaos run's faults, and the operator's bounds they are set against
    (
        "benchmarks.md",
        r"sleeps ([0-9]+) s, beyond the pods' `--stuck-seconds",
        lambda: chaosfaults.HANG_SECONDS,
    ),
    (
        "benchmarks.md",
        r"beyond the pods' `--stuck-seconds ([0-9]+)`",
        lambda: chaosfaults.STUCK_SECONDS,
    ),
    (
        "benchmarks.md",
        r"\(requests hang, watches drop\) for ([0-9]+) s",
        lambda: chaosfaults.APIPAUSE_MAX_S,
    ),
    (
        "benchmarks.md",
        r"so the lease stays held for its full ([0-9]+) s",
        lambda: checkpointrequests.LEASE_SECONDS,
    ),
    (
        "benchmarks.md",
        r"deliver every event ([0-9]+) s late while writes succeed",
        lambda: chaosfaults.WATCHLAG_S,
    ),
    (
        "benchmarks.md",
        r"until the faults stop \(at most ([0-9]+) s\)",
        lambda: chaosfaults.WATCHLAG_MAX_S,
    ),
    (
        "benchmarks.md",
        r"the operator's ([0-9]+) s wait for the echo of its own writes",
        lambda: rosters.ECHO_SECONDS,
    ),
    ("benchmarks.md", r"`relist` \| for ([0-9]+) s", lambda: chaosfaults.RELIST_S),
    (
        "benchmarks.md",
        r"a stream opened meanwhile after ([0-9]+) s",
        lambda: chaosfaults.RELIST_STREAM_S,
    ),
    (
        "benchmarks.md",
        r"\(no events, no bookmarks\) for ([0-9]+) s",
        lambda: chaosfaults.WATCHSTALL_S,
    ),
    (
        "benchmarks.md",
        r"beyond the operator's ([0-9]+) s inactivity timeout",
        lambda: kopfwiring.WATCH_INACTIVITY_SECONDS,
    ),
    (
        "benchmarks.md",
        r"Ours lists each hub (four) times a second",
        lambda: 1 / growth.GROWTH_POLL_SECONDS,
    ),
    (
        "benchmarks.md",
        r"waits at most a (quarter) second for its listing",
        lambda: 1 / growth.GROWTH_POLL_SECONDS,
    ),
]
WORDS = {"minute": 60.0, "four": 4.0, "quarter": 4.0}


@pytest.mark.parametrize(
    ("name", "pattern", "value"),
    CODE_FIGURES,
    ids=[f"{name}:{pattern[:40]}" for name, pattern, _ in CODE_FIGURES],
)
def test_a_figure_a_page_takes_from_the_code_is_the_codes(
    name: str, pattern: str, value: Callable[[], float]
) -> None:
    match = re.search(pattern, page_text(name))
    assert match, f"docs/{name} no longer says {pattern!r}"
    said = match.group(1)
    stated = WORDS[said] if said in WORDS else float(said.replace(",", ""))
    assert math.isclose(stated, float(value())), f"docs/{name}: {match.group(0)!r}"


def deletion_path_files() -> list[Path]:
    """The files of the architecture page's table of the path a pod deletion takes."""
    text = (DOCS / "architecture.md").read_text()
    table = text.split("### Following one pod deletion", 1)[1].split("Run\n", 1)[0]
    names = [
        m.group(1)
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| stage")
        for m in re.finditer(r"`([\w/]+\.py)`", line.split("|")[2])
    ]
    found = []
    for name in names:
        name = name.removeprefix("handlers/")
        for folder in ("handlers", "handlers/cache", "reconciling"):
            path = PRODUCT / folder / name.removeprefix("cache/")
            if name.startswith("cache/") and folder != "handlers/cache":
                continue
            if path.exists():
                found.append(path)
                break
        else:
            pytest.fail(f"the deletion path's {name} is no file of handlers/ or reconciling/")
    return found


def test_the_deletion_paths_figures_are_those_of_its_files() -> None:
    from tests.handlers.wire import test_deletion_path

    files = deletion_path_files()
    lines = sum(len(p.read_text().splitlines()) for p in files)
    text = page_text("architecture.md")
    assert len(set(files)) == len(files) == test_deletion_path.CEILING
    assert figure(text, r"a deletion runs through ([0-9]+) files") == test_deletion_path.CEILING
    stated = figure(text, r"The [0-9]+ files hold about ([0-9,]+) lines")
    assert abs(stated - lines) <= 0.05 * lines, f"the files hold {lines:,} lines"
    least = figure(text, r"at 400 lines a file they need ([0-9]+) files at the very least")
    assert least <= math.ceil(lines / 400), f"{lines:,} lines need {math.ceil(lines / 400)}"
    assert figure(text, r"in the lines it runs \(more than ([0-9,]+);") == (
        test_deletion_path.LINES_CEILING
    )


def test_the_benchmarks_page_says_whether_chaos_runs_are_recorded() -> None:
    recorded = sorted((DOCS / "benchmarks").glob("chaos-*.json"))
    says_none = "No chaos run is recorded" in page_text("benchmarks.md")
    assert not (recorded and says_none), f"{len(recorded)} chaos runs are recorded"


def test_the_status_page_lists_as_unbuilt_nothing_the_planner_does() -> None:
    """A burst of joins is planned once (`Member.starting`, tests/planner/test_joins.py)."""
    unbuilt = page_text("status.md").split("**Not built yet**", 1)[1]
    assert "starting" in models.Member.__dataclass_fields__
    assert "burst of joins" not in unbuilt


def test_the_status_page_does_not_make_a_silent_watch_stop_a_takeover() -> None:
    """Every namespace's pods are listed afresh every `relisting.RELIST_SECONDS` whatever the
    watches do (tests/handlers/test_selfhealing.py, the pod deleted behind a late watch)."""
    text = page_text("status.md")
    assert "delays a deleted pod's takeover until the watch resumes" not in text
    assert relisting.RELIST_SECONDS <= 10


def test_the_sdk_pins_cover_what_the_status_page_says_they_pin() -> None:
    pins = (ROOT / "tests" / "install" / "test_sdk_pins.py").read_text()
    said = page_text("status.md").split("tests/install/test_sdk_pins.py` fails when", 1)[1]
    named = re.findall(r"`(_\w+)`", said.split(".", 1)[0])
    assert named, "the status page no longer says what the SDK pins hold"
    assert [n for n in named if f"{n}(" not in pins and f".{n}" not in pins] == []
