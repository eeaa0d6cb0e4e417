"""The commands' tables: left-aligned columns three spaces apart, a header on top."""

from __future__ import annotations

from collections.abc import Sequence


def render(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    """``header`` and ``lines`` as aligned columns (trailing spaces cut)."""
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *lines]
    )
