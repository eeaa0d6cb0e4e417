"""The order in which ``--dist loadfile`` hands test files to the xdist workers.

xdist hands out whole files, the ones with the most tests first. Here that put the wire files
(one to four tests each, 10 to 80 s apiece) at the end of the run: one worker went on with
the last of them for up to a minute or two after the other had nothing left to take. The
files that start real components are handed out first instead, then the rest (in xdist's own
order, the most tests first), so that the run ends on files of short unit tests and both
workers finish within seconds of each other. Which tests run, and how, does not change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

#: Folders whose test files start real components (tests/install/test_test_layout.py keeps
#: the stack's fixtures to them).
HEAVY_FOLDERS = frozenset({"wire", "spark", "chaos", "e2e"})


def is_heavy(root: Path, scope: str) -> bool:
    """Whether the test file ``scope`` (a path from ``root``) starts real components or says
    it is slow (``pytest.mark.slow``)."""
    path = Path(scope)
    if HEAVY_FOLDERS & set(path.parts[:-1]):
        return True
    try:
        return "mark.slow" in (root / path).read_text(encoding="utf-8")
    except OSError:
        return False


def ordered(root: Path, workqueue: dict[str, dict[str, bool]]) -> list[tuple[str, Any]]:
    """The files of ``workqueue`` (scope -> its tests, in xdist's order), heavy ones first;
    within each kind, the order xdist gave (a stable sort)."""
    return sorted(workqueue.items(), key=lambda item: not is_heavy(root, item[0]))


class HeavyFirstScheduling(LoadFileScheduling):  # type: ignore[misc]
    """`LoadFileScheduling` that hands out the heavy files (`is_heavy`) first."""

    _reordered = False

    def _assign_work_unit(self, node: Any) -> None:
        if not self._reordered:
            self._reordered = True
            # xdist's own queue (an OrderedDict of scope -> tests): left as it is should a later
            # xdist name or shape it otherwise, which changes only the order, never the tests.
            queue = getattr(self, "workqueue", None)
            if isinstance(queue, dict):
                items = ordered(Path(self.config.rootpath), queue)
                queue.clear()
                queue.update(items)
        super()._assign_work_unit(node)
