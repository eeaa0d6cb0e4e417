"""What a process tree holds, sampled over a soak (`soaking`, `churning`): resident memory,
threads, open descriptors and processes (`usage`, read from /proc), kept as columns
(`Series`), and their least-squares growth over the second half of a run
(`second_half_slopes`): the first half holds the start-up, which is not what grows for weeks."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TypedDict

#: Threads and descriptors are flat when their slope adds fewer than this over the second
#: half (Spark's pools start a thread or open a file now and then, and keep them).
FLAT_COUNT = 2
#: Fewer samples in the second half than this give no slope worth reporting.
MIN_SLOPE_SAMPLES = 3


@dataclasses.dataclass(frozen=True)
class Usage:
    """What a process tree holds at one moment."""

    rss_bytes: int
    threads: int
    descriptors: int
    processes: int


class Series(TypedDict):
    """The samples, one list per quantity (columns: what a plot reads)."""

    t_s: list[float]
    rss_mb: list[float]
    threads: list[int]
    descriptors: list[int]
    processes: list[int]


class Slopes(TypedDict):
    """Least-squares slopes over the second half, per minute."""

    rss_mb_per_min: float | None
    threads_per_min: float | None
    descriptors_per_min: float | None


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        # The command name may hold spaces and parentheses: the fields follow its last ")".
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        found.setdefault(parent, []).append(int(entry))
    return found


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant now alive."""
    children = _children()
    tree, queue = [], [root]
    while queue:
        pid = queue.pop()
        tree.append(pid)
        queue.extend(children.get(pid, []))
    return tree


def usage(pids: Sequence[int]) -> Usage:
    """Resident memory, threads and descriptors summed over ``pids`` (gone ones count 0)."""
    page = os.sysconf("SC_PAGE_SIZE")
    rss = threads = descriptors = processes = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                pages = int(f.read().split()[1])
            threads_now = len(os.listdir(f"/proc/{pid}/task"))
            descriptors_now = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        rss += pages * page
        threads += threads_now
        descriptors += descriptors_now
        processes += 1
    return Usage(rss_bytes=rss, threads=threads, descriptors=descriptors, processes=processes)


def slope_per_min(times: Sequence[float], values: Sequence[float]) -> float | None:
    """The least-squares slope of ``values`` over ``times`` (seconds), per minute."""
    if len(times) < MIN_SLOPE_SAMPLES:
        return None
    mean_t = sum(times) / len(times)
    mean_v = sum(values) / len(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / spread
    return 60.0 * slope


def second_half_slopes(series: Series, *, seconds: float) -> Slopes:
    half = [i for i, t in enumerate(series["t_s"]) if t >= seconds / 2]
    times = [series["t_s"][i] for i in half]

    def slope(values: Sequence[float]) -> float | None:
        found = slope_per_min(times, [values[i] for i in half])
        return None if found is None else round(found, 4)

    return {
        "rss_mb_per_min": slope(series["rss_mb"]),
        "threads_per_min": slope(series["threads"]),
        "descriptors_per_min": slope(series["descriptors"]),
    }
