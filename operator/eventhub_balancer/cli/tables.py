"""The commands' tables: left-aligned columns three spaces apart, a header on top."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds


def render(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    """``header`` and ``lines`` as aligned columns (trailing spaces cut), each cell as printable
    text (`bounds.printable`: what tenants wrote never acts on the terminal)."""
    lines = [[bounds.printable(cell) for cell in row] for row in lines]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *lines]
    )


def partition_runs(
    partitions: Iterable[str], label: Callable[[str], str] = lambda _: ""
) -> list[tuple[str, str]]:
    """Partitions in natural order, consecutive numbers folded into runs (``0-255``) that
    break where ``label`` (an epoch, say) changes: each run with its label. A pod's row lists
    runs, not every partition: one of 256 partitions was 1,600 characters wide."""
    runs: list[list[str]] = []  # [first, last, label]
    for p in sorted(partitions, key=models.name_key):
        mark = label(p)
        last = runs[-1] if runs else None
        if (
            last is not None
            and mark == last[2]
            and p.isdecimal()
            and last[1].isdecimal()
            and int(p) == int(last[1]) + 1
        ):
            last[1] = p
        else:
            runs.append([p, p, mark])
    return [(first if first == last else f"{first}-{last}", mark) for first, last, mark in runs]
