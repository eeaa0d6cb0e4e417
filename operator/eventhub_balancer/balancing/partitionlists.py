"""Partition ids as a person reads them: in natural order, consecutive numbers folded into
runs (``0-3,8,10-11,x``), with their epochs said once (``epochs 1-3``).

One way for everything that lists partitions to a person: ``ehb status``'s and ``ehb plan``'s
rows, a pod's log of its assignment and acknowledgements, and the demo's live view. One row
of 256 partitions was 1,600 characters wide before its runs were folded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from eventhub_balancer.balancing import models


def runs(
    partitions: Iterable[str], label: Callable[[str], str] = lambda _: ""
) -> list[tuple[str, str]]:
    """Partitions in natural order, consecutive numbers folded into runs (``0-255``) that
    break where ``label`` (an epoch, say) changes: each run with its label."""
    found: list[list[str]] = []  # [first, last, label]
    for p in sorted(partitions, key=models.name_key):
        mark = label(p)
        last = found[-1] if found else None
        if (
            last is not None
            and mark == last[2]
            and p.isdecimal()
            and last[1].isdecimal()
            and int(p) == int(last[1]) + 1
        ):
            last[1] = p
        else:
            found.append([p, p, mark])
    return [(first if first == last else f"{first}-{last}", mark) for first, last, mark in found]


def compact(partitions: Iterable[str]) -> str:
    """``0-3,8,10-11,x``; empty for no partitions."""
    return ",".join(run for run, _ in runs(partitions))


def epochs(numbers: Iterable[int]) -> str:
    """``epoch 3``, or ``epochs 1-3,5``: each epoch said once."""
    distinct = sorted(set(numbers))
    if len(distinct) == 1:
        return f"epoch {distinct[0]}"
    return "epochs " + (compact(str(e) for e in distinct) or "none")
