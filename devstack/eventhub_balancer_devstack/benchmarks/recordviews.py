"""How each benchmark's record reads as Markdown (`records` renders them into the pages):
figures as tables, the balance benchmark side by side with the SDK's and against its targets,
the stages of a step, and anything else as a figure/value table (`generic`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from eventhub_balancer_devstack.benchmarks import stages


def number(value: object) -> str:
    """A figure as a table cell: thousands separated, at most six significant digits."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) >= 1 else f"{value:.3g}"
    return str(value).replace("|", "\\|")


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: int = 0) -> str:
    """A Markdown table; the columns from ``numeric`` on hold figures and are right-aligned."""
    align = ["---" if i < numeric else "---:" for i in range(len(header))]
    lines = [f"| {' | '.join(header)} |", f"| {' | '.join(align)} |"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


def _flat(result: Mapping[str, object], prefix: str = "") -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for key, value in result.items():
        if isinstance(value, Mapping):
            found += _flat(value, f"{prefix}{key}.")
        elif not isinstance(value, list):
            found.append((f"{prefix}{key}", value))
    return found


def _rows_table(rows: Sequence[Mapping[str, object]]) -> str:
    header: list[str] = []
    for row in rows:
        header += [k for k in row if k not in header]
    # Text columns (names, cases) first, so that the figures line up on the right.
    header.sort(key=lambda k: all(isinstance(r.get(k), int | float | None) for r in rows))
    figures = sum(all(isinstance(r.get(k), int | float | None) for r in rows) for k in header)
    cells = [[number(row.get(k)) for k in header] for row in rows]
    return table(header, cells, numeric=len(header) - figures)


def generic(result: object) -> str:
    """Any result: its scalars as a figure/value table, each list of objects as a table."""
    if isinstance(result, list) and all(isinstance(r, Mapping) for r in result):
        return _rows_table(result)
    if not isinstance(result, Mapping):
        return f"`{json.dumps(result)}`"
    parts = []
    scalars = _flat(result)
    if scalars:
        rows = [[f"`{k}`", number(v)] for k, v in scalars]
        parts.append(table(["figure", "value"], rows, numeric=1))
    for key, value in result.items():
        if isinstance(value, list) and value and all(isinstance(r, Mapping) for r in value):
            parts.append(f"`{key}`:\n\n{_rows_table(value)}")
    return "\n\n".join(parts)


def planner(result: object) -> str:
    """``ehb bench planner``: one row per fleet, one column per case (ms per plan)."""
    if not isinstance(result, list):
        return generic(result)
    cases: list[str] = []
    fleets: dict[tuple[object, object], dict[str, object]] = {}
    for figure in result:
        if not isinstance(figure, Mapping):
            return generic(result)
        case = str(figure.get("case"))
        cases += [case] if case not in cases else []
        fleets.setdefault((figure.get("partitions"), figure.get("pods")), {})[case] = figure.get(
            "ms"
        )
    header = ["partitions", "pods", *(f"{c} ms" for c in cases)]
    rows = [
        [number(p), number(n), *(number(times.get(c)) for c in cases)]
        for (p, n), times in fleets.items()
    ]
    return table(header, rows, numeric=2)


def value_at(mapping: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def _seconds(value: object, *, timeout: object) -> str:
    if value is None:
        return f"not within {number(timeout)} s" if timeout is not None else "-"
    return number(value)


def _pair(step: object, key: str) -> str:
    return f"{number(value_at(step, 'sdk', key))} / {number(value_at(step, 'ours', key))}"


def balance(result: object) -> str:
    """``ehb bench balance``: the SDK's balancer and ours, step by step, and the targets."""
    steps = value_at(result, "steps")
    if not isinstance(steps, list):
        return generic(result)
    sdk_timeout = value_at(result, "settings", "sdk_timeout_s")
    ours_timeout = value_at(result, "settings", "ours_timeout_s")
    rows = []
    for step in steps:
        sdk = value_at(step, "sdk", "balanced_s")
        ours = value_at(step, "ours", "balanced_s")
        ratio = value_at(step, "ratio")
        if ratio is not None:
            shown = f"{number(ratio)}x"
        elif sdk is None and isinstance(ours, int | float) and isinstance(sdk_timeout, int | float):
            # The SDK did not balance within its timeout: the ratio is at least this.
            shown = f"> {sdk_timeout / ours:.0f}x" if ours > 0 else "-"
        else:
            shown = "-"
        rows.append(
            [
                str(value_at(step, "step")),
                _seconds(sdk, timeout=sdk_timeout),
                _seconds(ours, timeout=ours_timeout),
                shown,
                _seconds(value_at(step, "sdk", "end_to_end_s"), timeout=sdk_timeout),
                _seconds(value_at(step, "ours", "end_to_end_s"), timeout=ours_timeout),
                _pair(step, "failover_s"),
                _pair(step, "moved"),
                _pair(step, "duplicates"),
                _pair(step, "lost"),
            ]
        )
    header = [
        "step",
        "SDK balanced s",
        "ours balanced s",
        "ratio",
        "SDK end to end s",
        "ours end to end s",
        "failover s SDK / ours",
        "moved SDK / ours",
        "duplicates SDK / ours",
        "lost SDK / ours",
    ]
    parts = [table(header, rows, numeric=1)]
    settings = value_at(result, "settings")
    parts.append(
        f"{number(value_at(settings, 'partitions'))} -> {number(value_at(settings, 'grow_to'))} "
        f"partitions, {number(value_at(settings, 'rate'))} events/s, a "
        f"{number(value_at(settings, 'interval_seconds'))} s cycle for both. In all: produced "
        f"{_pair(result, 'produced')}, duplicates {_pair(result, 'duplicates')}, lost "
        f"{_pair(result, 'lost')} (SDK / ours). Ratio SDK / ours over the steps both balanced: "
        f"{number(value_at(result, 'ratio_balanced_s'))} (balanced), "
        f"{number(value_at(result, 'ratio_end_to_end_s'))} (end to end)."
    )
    targets = value_at(result, "targets")
    if isinstance(targets, Mapping) and targets:
        target_rows = [
            [
                f"`{name}`",
                str(value_at(t, "target")),
                number(value_at(t, "measured")),
                _met(value_at(t, "met")),
            ]
            for name, t in targets.items()
        ]
        parts.append(table(["target", "wanted", "measured (ours)", ""], target_rows, numeric=2))
    return "\n\n".join(parts)


def _met(met: object) -> str:
    """A target's verdict; ``null``: the run was not of the size the target is judged at."""
    if met is None:
        return "not judged"
    return "met" if met else "not met"


#: The columns of ``ehb bench decide --json`` (`decide`).
DECIDE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("partitions", "partitions"),
    ("pods", "pods"),
    ("cold_ms", "cold (ms)"),
    ("decide_ms", "decision (ms)"),
    ("planner_ms", "planner (ms)"),
    ("outside_planner_ms", "the rest (ms)"),
)


def decide(result: object) -> str:
    """``ehb bench decide``: one row per fleet, the decision cold, and warm split at the
    planner."""
    if not (isinstance(result, list) and all(isinstance(r, Mapping) for r in result)):
        return generic(result)
    rows = [[number(value_at(r, key)) for key, _ in DECIDE_COLUMNS] for r in result]
    return table([title for _, title in DECIDE_COLUMNS], rows, numeric=0)


def _ms(value: object) -> str:
    """Milliseconds to the millisecond: the records' clocks say no more."""
    return f"{value:,.0f}" if isinstance(value, int | float) else number(value)


def _stage_table(steps: Sequence[tuple[str, object]]) -> str:
    """One row per stage, one column per step: median / max milliseconds (count)."""
    rows = []
    for key, title in stages.STAGES:
        cells = []
        for _, found in steps:
            figure = value_at(found, key)
            cells.append(
                "-"
                if not isinstance(figure, Mapping)
                else f"{_ms(figure.get('median_ms'))} / {_ms(figure.get('max_ms'))} "
                f"({number(figure.get('count'))})"
            )
        if any(c != "-" for c in cells):
            rows.append([title, *cells])
    return table(["stage", *(name for name, _ in steps)], rows, numeric=1)


def balance_stages(result: object) -> str:
    """``ehb bench balance``: where each of our steps' time went (`stages`)."""
    steps = value_at(result, "steps")
    if not isinstance(steps, list) or not any(
        isinstance(value_at(s, "stages"), Mapping) for s in steps
    ):
        return "This record was taken before the benchmark timed the stages."
    parts = [_stage_table([(str(value_at(s, "step")), value_at(s, "stages")) for s in steps])]
    counted = []
    for step in steps:
        changes = value_at(step, "owner_changes")
        if not isinstance(changes, Mapping):
            continue
        twice = changes.get("moved_twice") or []
        shown = f" (moved twice: {', '.join(map(str, twice))})" if twice else ""
        counted.append(f"{value_at(step, 'step')}: {number(changes.get('count'))}{shown}")
    if counted:
        parts.append(
            "Partitions given to a pod at a new epoch, from the operator's committed ConfigMap "
            "writes (a partition moved twice counts twice): " + "; ".join(counted) + "."
        )
    return "\n\n".join(parts)


def operator_stages(result: object) -> str:
    """``ehb bench operator``: where a join's, a planned leave's and a deletion's time went."""
    found = value_at(result, "stages")
    if not isinstance(found, Mapping) or not found:
        return "This record was taken before the benchmark timed the stages."
    return _stage_table([(str(step).replace("_", " "), s) for step, s in found.items()])


def operator(result: object) -> str:
    """``ehb bench operator``: its figures; the stages go to their own marker."""
    if isinstance(result, Mapping):
        result = {k: v for k, v in result.items() if k != "stages"}
    return generic(result)


#: Benchmarks whose figures read better in a shape of their own; the rest are ``generic``.
VIEWS: Mapping[str, Callable[[object], str]] = {
    "planner": planner,
    "balance": balance,
    "decide": decide,
    "operator": operator,
}

#: Markers that show another view of a record, ``NAME-stages`` for the stages of ``NAME``.
ASPECTS: Mapping[str, tuple[str, Callable[[object], str]]] = {
    "balance-stages": ("balance", balance_stages),
    "operator-stages": ("operator", operator_stages),
}
