"""Partition ids as a person reads them: in natural order, consecutive numbers folded into
runs (``0-3,8,10-11,x``), with their epochs said once (``epochs 1-3``).

One way for everything that lists partitions to a person: ``ehb status``'s and ``ehb plan``'s
rows, a pod's log of its assignment and acknowledgements, the demo's live view, and the
operator's conditions and Events (`named`, bounded). One row of 256 partitions was 1,600
characters wide before its runs were folded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from eventhub_balancer.balancing import models


def runs(
    partitions: Iterable[str], label: Callable[[str], str] = lambda _: ""
) -> list[tuple[str, str]]:
    """Partitions in natural order, consecutive numbers folded into runs (``0-255``) that
    break where ``label`` (an epoch, say) changes: each run with its label."""
    return [(run, mark) for run, mark, _ in _spans(partitions, label)]


def _spans(partitions: Iterable[str], label: Callable[[str], str]) -> list[tuple[str, str, int]]:
    """`runs`, each with how many partitions it folds."""
    found: list[list[str]] = []  # [first, last, label]
    sizes: list[int] = []
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
            sizes[-1] += 1
        else:
            found.append([p, p, mark])
            sizes.append(1)
    return [
        (first if first == last else f"{first}-{last}", mark, size)
        for (first, last, mark), size in zip(found, sizes, strict=True)
    ]


def compact(partitions: Iterable[str]) -> str:
    """``0-3,8,10-11,x``; empty for no partitions."""
    return ",".join(run for run, _ in runs(partitions))


def named(partitions: Iterable[str], limit: int) -> str:
    """``0-7, 9, 12-31`` in a sentence: the first ``limit`` runs, and past them the partitions
    left counted (``0, 2, 4 and 29 more``). Each partition is named in a run or counted, never
    both, so a message bounded by runs stays bounded whatever the hub's size."""
    spans = _spans(partitions, lambda _: "")
    shown = spans[:limit]
    more = sum(size for _, _, size in spans[limit:])
    text = ", ".join(run for run, _, _ in shown)
    return text + (f" and {more} more" if more else "")


def by_state(
    states: Iterable[str],
    entries: Mapping[str, tuple[str, int]],
    more: Callable[[list[str]], str] = lambda _: "",
) -> str:
    """``owned 0-2,5 (epoch 3); revoking 4 (epoch 2)``: ``entries`` ({partition: (state,
    epoch)}) by state in the order of ``states``, each state's epochs said once and ``more``
    of its partitions after them; empty for none. A pod's log of its assignment and of its
    reports."""
    said = []
    for state in states:
        ids = [p for p, (s, _) in entries.items() if s == state]
        if ids:
            numbers = epochs(entries[p][1] for p in ids)
            said.append(f"{state} {compact(ids)} ({numbers}{more(ids)})")
    return "; ".join(said)


def epochs(numbers: Iterable[int]) -> str:
    """``epoch 3``, or ``epochs 1-3,5``: each epoch said once."""
    distinct = sorted(set(numbers))
    if len(distinct) == 1:
        return f"epoch {distinct[0]}"
    return "epochs " + (compact(str(e) for e in distinct) or "none")
