"""Benchmark records: what a benchmark printed, kept with its date and the machine's load.

The manual's figures are never typed by hand. Recording runs a benchmark command with
``--json`` and keeps its output in ``docs/benchmarks/NAME.json`` together with when it ran and
the load average at the end of the run: the development machines are small and shared, and
every figure moves with their load, so a figure without its load says little.

The docs site renders the records: its hook (``docs/hooks/figures.py``) replaces each
``<!-- figures: NAME -->`` marker in a page with the tables of ``NAME.json`` (``expand``).
The README, which no hook reads, carries the rendered tables between ``<!-- figures: NAME -->``
and ``<!-- /figures -->``; ``refresh`` rewrites them in place, and a test fails when they
differ from the records. How each benchmark's record reads as tables is `recordviews`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from eventhub_balancer import errors
from eventhub_balancer_devstack.benchmarks import recordviews, servercomparisons

logger = logging.getLogger(__name__)

#: Where the records live, relative to the repository root (the docs site reads them there).
DIRECTORY = Path("docs") / "benchmarks"

#: The records of runs on the real control plane (``--kube real``): ``real-NAME``.
REAL_PREFIX = "real-"

#: A record's name is also its file name: no path separators, nothing hidden. (Lower case
#: only, so that a page can show the marker's form, ``<!-- figures: NAME -->``, as text.)
_NAME = r"[a-z0-9][a-z0-9_-]*"
NAME = re.compile(_NAME)

#: A marker in a page; in a file that no hook reads, a block that ends at ``END``.
MARKER = re.compile(rf"<!-- figures: (?P<name>{_NAME}) -->")
END = "<!-- /figures -->"
BLOCK = re.compile(
    # The body never holds another marker: a lone marker before a block is not swallowed.
    rf"<!-- figures: (?P<name>{_NAME}) -->\n(?P<body>(?:(?!<!-- figures:).)*?)" + re.escape(END),
    re.DOTALL,
)


class RecordBody(TypedDict):
    """``docs/benchmarks/NAME.json`` as written."""

    benchmark: str
    command: str
    date: str
    load_average: list[float]
    result: object


@dataclasses.dataclass(frozen=True)
class Record:
    """One benchmark run: the command, when it ended, the load then, and what it printed."""

    benchmark: str
    command: str
    #: ISO 8601, UTC, to the second.
    date: str
    #: The 1, 5 and 15 minute load averages at the end of the run.
    load_average: tuple[float, float, float]
    #: The benchmark's JSON document, as it printed it.
    result: object

    def body(self) -> RecordBody:
        return {
            "benchmark": self.benchmark,
            "command": self.command,
            "date": self.date,
            "load_average": list(self.load_average),
            "result": self.result,
        }


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise errors.InvalidInput(
            "NAME", f"{name!r} is not a record name (lower-case letters, digits, - and _)"
        )
    return name


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (round(one, 2), round(five, 2), round(fifteen, 2))


def parse_output(stdout: str, *, command: str) -> object:
    """The JSON document a benchmark printed.

    A ``--json`` output is exactly one JSON document. When something else was printed before
    it, the last document that runs to the end of the output is kept, with a warning: a
    benchmark that mixes logs into stdout is a bug of that benchmark, not a reason to lose
    its figures.
    """
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^[\[{]", stdout)]
    for start in starts:
        try:
            document, end = decoder.raw_decode(stdout, start)
        except json.JSONDecodeError:
            continue
        if not stdout[end:].strip():
            logger.warning(
                "%s: stdout is not pure JSON; kept the JSON document at its end and dropped "
                "%d characters before it",
                command,
                start,
            )
            return document
    raise errors.InvalidInput("COMMAND", f"{command} printed no JSON document on stdout")


def run(
    name: str,
    command: Sequence[str],
    *,
    runner: Callable[[Sequence[str]], subprocess.CompletedProcess[str]] | None = None,
) -> Record:
    """Run a benchmark command and keep what it printed on stdout (stderr passes through)."""
    check_name(name)
    if not command:
        raise errors.InvalidInput("COMMAND", "give the benchmark command after --")
    text = shlex.join(command)
    logger.info("recording %s: %s", name, text)
    completed = (runner or _run)(command)
    if completed.returncode != 0:
        raise errors.EventHubBalancerError(
            f"{text} exited with status {completed.returncode}; nothing recorded"
        )
    result = parse_output(completed.stdout, command=text)
    return Record(
        benchmark=name, command=text, date=now(), load_average=load_average(), result=result
    )


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(command), stdout=subprocess.PIPE, text=True, check=False)
    except OSError as e:
        raise errors.InvalidInput("COMMAND", f"cannot run {command[0]}: {e.strerror}") from e


def from_output(
    name: str,
    command: str,
    *,
    output: Path,
    load: tuple[float, float, float] | None = None,
) -> Record:
    """A record of a run that already happened, its stdout saved in ``output``.

    The date is the file's last write (the end of the run); the load average is ``load``
    when it was noted at the end of the run, else the load now.
    """
    check_name(name)
    try:
        stdout = output.read_text()
        mtime = output.stat().st_mtime
    except OSError as e:
        raise errors.InvalidInput("--result", f"cannot read {output}: {e.strerror}") from e
    date = datetime.datetime.fromtimestamp(mtime, datetime.UTC).isoformat(timespec="seconds")
    return Record(
        benchmark=name,
        command=command,
        date=date,
        load_average=load or load_average(),
        result=parse_output(stdout, command=command),
    )


def write(record: Record, *, directory: Path = DIRECTORY) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record.benchmark}.json"
    path.write_text(json.dumps(record.body(), indent=2) + "\n")
    return path


def read(name: str, *, directory: Path = DIRECTORY) -> Record:
    path = directory / f"{check_name(name)}.json"
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise errors.InvalidInput(
            "figures", f"no record {path}: record it (make figures) or fix the marker's name"
        ) from None
    except json.JSONDecodeError as e:
        raise errors.InvalidInput("figures", f"{path} is not JSON: {e.msg}") from e
    if not isinstance(body, dict) or set(body) != set(RecordBody.__annotations__):
        raise errors.InvalidInput(
            "figures", f"{path}: expected the keys {sorted(RecordBody.__annotations__)}"
        )
    load = body["load_average"]
    if not (
        isinstance(load, list) and len(load) == 3 and all(isinstance(x, int | float) for x in load)
    ):
        raise errors.InvalidInput("figures", f"{path}: load_average must be three numbers")
    return Record(
        benchmark=str(body["benchmark"]),
        command=str(body["command"]),
        date=str(body["date"]),
        load_average=(float(load[0]), float(load[1]), float(load[2])),
        result=body["result"],
    )


# -- rendering ---------------------------------------------------------------------------------


def caption(record: Record) -> str:
    date = datetime.datetime.fromisoformat(record.date).astimezone(datetime.UTC)
    one, five, fifteen = record.load_average
    return (
        f"Recorded {date:%Y-%m-%d %H:%M} UTC with `{record.command}`, load average "
        f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) at the end of the run."
    )


#: The columns of a series of ``ehb bench operator --json`` records (`operator_series`).
OPERATOR_COLUMNS: tuple[tuple[str, str], ...] = (
    ("consumers", "consumers"),
    ("partitions", "partitions"),
    ("pods", "pods"),
    ("join_balanced_s", "join (s)"),
    ("planned_leave_balanced_s", "planned leave (s)"),
    ("deleted_pod_reassigned_s", "deleted pod (s)"),
    ("steady_state_requests_per_cycle", "requests / steady cycle"),
    ("cycle_cpu_ms", "CPU / cycle (ms)"),
    ("steady_cpu_cores", "CPU, steady (cores)"),
    ("operator_rss_mb", "RSS (MB)"),
    ("relist_lists_per_consumer", "LISTs / consumer after a re-list"),
)


def operator_series(records: Sequence[Record]) -> str:
    """Several ``ehb bench operator`` runs as one table, a row per fleet size, and a line per
    run saying when and under what load it was taken."""
    ordered = sorted(
        records,
        key=lambda r: tuple(
            float(str(recordviews.value_at(r.result, key) or 0))
            for key in ("consumers", "partitions", "pods")
        ),
    )
    return _series_table(ordered, OPERATOR_COLUMNS, numeric=0)


#: The columns of a series of ``ehb bench operator --json --other-pods N [--pod-selector S]``
#: records (`shared_series`): the text column first.
SHARED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("pod_selector", "--pod-selector"),
    ("other_pods", "other pods"),
    ("pods_list_bytes", "pods LIST (bytes)"),
    ("first_balance_s", "first balance (s)"),
    ("operator_peak_rss_mb", "peak RSS (MB)"),
    ("relist_peak_rss_mb", "peak RSS, re-list (MB)"),
    ("operator_rss_mb", "RSS (MB)"),
    ("join_balanced_s", "join (s)"),
    ("planned_leave_balanced_s", "planned leave (s)"),
    ("deleted_pod_reassigned_s", "deleted pod (s)"),
)


def shared_series(records: Sequence[Record]) -> str:
    """``ehb bench operator`` runs in a namespace shared with other workloads, a row per run:
    by the other pods, the operator watching every pod before the one with a selector."""
    ordered = sorted(
        records,
        key=lambda r: (
            float(str(recordviews.value_at(r.result, "other_pods") or 0)),
            recordviews.value_at(r.result, "pod_selector") is not None,
        ),
    )
    return _series_table(ordered, SHARED_COLUMNS, numeric=1)


def _series_table(
    ordered: Sequence[Record], columns: Sequence[tuple[str, str]], *, numeric: int
) -> str:
    rows = [
        [recordviews.number(recordviews.value_at(r.result, key)) for key, _ in columns]
        for r in ordered
    ]
    header = [title for _, title in columns]
    notes = "\n".join(f"- {caption(r)}" for r in ordered)
    return f"{recordviews.table(header, rows, numeric=numeric)}\n\n{notes}\n"


#: Markers that name a series: every record ``NAME-*.json``, rendered together as one table.
SERIES: Mapping[str, Callable[[Sequence[Record]], str]] = {
    "scale": operator_series,
    "real-scale": operator_series,
    "real-shared": shared_series,
}


def read_series(name: str, *, directory: Path = DIRECTORY) -> list[Record]:
    found = sorted(directory.glob(f"{check_name(name)}-*.json"))
    if not found:
        raise errors.InvalidInput(
            "figures", f"no records {directory}/{name}-*.json: record them (ehb bench record)"
        )
    return [read(path.stem, directory=directory) for path in found]


def render(record: Record) -> str:
    """The Markdown for a record: its tables, then where and under what load it was taken."""
    # A run on the real control plane (``real-NAME``) reads as its local counterpart.
    view = recordviews.VIEWS.get(record.benchmark.removeprefix(REAL_PREFIX), recordviews.generic)
    return f"{view(record.result)}\n\n{caption(record)}\n"


def render_name(name: str, *, directory: Path = DIRECTORY) -> str:
    """The Markdown for a marker: a series' table, or one record's tables."""
    if name == servercomparisons.MARKER:
        return servercomparisons.render(
            directory,
            read=lambda record: read(record, directory=directory).result,
            caption=lambda record: caption(read(record, directory=directory)),
        )
    if name in SERIES:
        return SERIES[name](read_series(name, directory=directory))
    aspect = name.removeprefix(REAL_PREFIX)
    if aspect in recordviews.ASPECTS:
        record_name, view = recordviews.ASPECTS[aspect]
        record_name = name[: len(name) - len(aspect)] + record_name
        record = read(record_name, directory=directory)
        return f"{view(record.result)}\n\n{caption(record)}\n"
    return render(read(name, directory=directory))


def expand(markdown: str, *, directory: Path = DIRECTORY) -> str:
    """A page with every marker (or block) replaced by its record's tables (for the site)."""
    markdown = BLOCK.sub(lambda m: render_name(m["name"], directory=directory), markdown)
    return MARKER.sub(lambda m: render_name(m["name"], directory=directory), markdown)


def refresh(markdown: str, *, directory: Path = DIRECTORY) -> str:
    """A file whose figure blocks are rendered again from the records, markers kept."""

    def block(match: re.Match[str]) -> str:
        name = match["name"]
        return f"<!-- figures: {name} -->\n{render_name(name, directory=directory)}{END}"

    return BLOCK.sub(block, markdown)
