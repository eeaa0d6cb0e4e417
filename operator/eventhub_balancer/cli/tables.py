"""The commands' tables: left-aligned columns three spaces apart, a header on top."""

from __future__ import annotations

from collections.abc import Sequence

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
