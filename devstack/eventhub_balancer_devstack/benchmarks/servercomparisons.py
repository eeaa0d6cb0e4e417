"""The same benchmarks on both Kubernetes API servers, side by side: the ``servers`` marker.

Every benchmark runs on the local API and, with ``--kube real``, on the real control plane;
each run is its own record (``NAME`` and ``real-NAME``). This table puts the figures a user
reads first next to each other, a row each, so that a difference between the servers shows
where it is. A row whose real-server record is missing is left out; a local record that is
missing shows as "not recorded".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from eventhub_balancer_devstack.benchmarks import recordviews

#: A record's result by name, and a record's caption by name (`records` passes its own).
ReadResult = Callable[[str], object]
Caption = Callable[[str], str]


#: The marker that renders this table: ``<!-- figures: servers -->``.
MARKER = "servers"


@dataclasses.dataclass(frozen=True)
class Row:
    label: str
    record: str
    keys: tuple[str, ...]


#: The figures compared, in the order a user asks about them.
ROWS: tuple[Row, ...] = (
    Row(
        "balance: slowest planned step balanced (s)",
        "balance",
        ("targets", "planned_step_balanced_s", "measured"),
    ),
    Row(
        "balance: scale-out, times faster than the SDK",
        "balance",
        ("targets", "scale_out_ratio", "measured"),
    ),
    Row(
        "balance: duplicates on planned moves",
        "balance",
        ("targets", "duplicates_on_planned_moves", "measured"),
    ),
    Row("balance: lost events", "balance", ("targets", "lost", "measured")),
    Row("32 x 4: join balanced (s)", "operator", ("join_balanced_s",)),
    Row("32 x 4: deleted pod reassigned (s)", "operator", ("deleted_pod_reassigned_s",)),
    Row("1,024 x 512: join balanced (s)", "scale-1024x512", ("join_balanced_s",)),
    Row("1,024 x 512: planned leave balanced (s)", "scale-1024x512", ("planned_leave_balanced_s",)),
    Row("1,024 x 512: deleted pod reassigned (s)", "scale-1024x512", ("deleted_pod_reassigned_s",)),
    Row(
        "1,024 x 512: requests per steady cycle",
        "scale-1024x512",
        ("steady_state_requests_per_cycle",),
    ),
    Row("1,000 consumers: join balanced (s)", "scale-1000x4x8", ("join_balanced_s",)),
    Row(
        "1,000 consumers: planned leave balanced (s)",
        "scale-1000x4x8",
        ("planned_leave_balanced_s",),
    ),
    Row(
        "1,000 consumers: deleted pod reassigned (s)",
        "scale-1000x4x8",
        ("deleted_pod_reassigned_s",),
    ),
    Row("demo: lost / duplicates", "demo", ()),
)


def _exists(name: str, directory: Path) -> bool:
    return (directory / f"{name}.json").is_file()


def _value(name: str, keys: tuple[str, ...], directory: Path, read: ReadResult) -> str:
    if not _exists(name, directory):
        return "not recorded"
    result = read(name)
    if not keys:  # the demo's summary
        lost = recordviews.value_at(result, "lost")
        duplicates = recordviews.value_at(result, "duplicates")
        return f"{recordviews.number(lost)} / {recordviews.number(duplicates)}"
    return recordviews.number(recordviews.value_at(result, *keys))


def _chaos_sums(paths: Sequence[Path], read: ReadResult) -> str:
    """Epochs reused and decreased over the chaos records ``paths``, and how many seeds."""
    reuse = decreased = 0
    for path in paths:
        result = read(path.stem)
        reuse += int(str(recordviews.value_at(result, "epoch_reuse") or 0))
        decreased += int(str(recordviews.value_at(result, "epochs_decreased") or 0))
    return f"{reuse} / {decreased} ({_count(len(paths), 'seed')})"


def _chaos(directory: Path, read: ReadResult) -> list[str] | None:
    """One row over every chaos record, ``chaos-*`` (local, where the watch faults run too)
    and ``real-chaos-*``: epochs reused and decreased, summed over the seeds."""
    real = sorted(directory.glob("real-chaos-*.json"))
    if not real:
        return None
    local = sorted(directory.glob("chaos-*.json"))
    return [
        "chaos: epochs reused / decreased",
        _chaos_sums(local, read) if local else "not recorded",
        _chaos_sums(real, read),
    ]


def _seeds_note(paths: Sequence[Path], caption: Caption) -> str:
    """One line for a series of chaos seeds: the first's caption stands for how they ran."""
    first, last = paths[0].stem, paths[-1].stem
    return f"- `{first}` to `{last}` ({_count(len(paths), 'run')}), the first: {caption(first)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def render(directory: Path, *, read: ReadResult, caption: Caption) -> str:
    rows: list[Sequence[str]] = []
    used: list[str] = []
    for row in ROWS:
        real = f"real-{row.record}"
        if not _exists(real, directory):
            continue
        rows.append(
            [
                row.label,
                _value(row.record, row.keys, directory, read),
                _value(real, row.keys, directory, read),
            ]
        )
        for name in (row.record, real):
            if _exists(name, directory) and name not in used:
                used.append(name)
    notes = [f"- `{name}`: {caption(name)}" for name in used]
    chaos = _chaos(directory, read)
    if chaos is not None:
        rows.append(chaos)
        for pattern in ("chaos-*.json", "real-chaos-*.json"):
            seeds = sorted(directory.glob(pattern))
            if seeds:
                notes.append(_seeds_note(seeds, caption))
    table = recordviews.table(["figure", "local API", "real control plane"], rows, numeric=1)
    return f"{table}\n\n{chr(10).join(notes)}\n"
