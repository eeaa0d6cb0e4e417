"""A failure that several partitions of a pod meet at once, said once for all of them.

An Event Hubs that refuses connections, or answers none, fails every partition of a pod
within seconds, and each partition says so: a pod of 16 partitions wrote about 475 lines a
minute at INFO and above (320 of them at WARNING or ERROR) behind a refused port, each one
naming its own partition and the same cause. One partition failing on its own is a fault of
that partition and is said as it comes; many failing together is one fault, and is said as
one.

`SharedLines` keeps, for one kind of line, which partitions said one in the last
`WINDOW_S` seconds. While only one did, its line is said as it comes. Once two or more do,
each partition's own line goes to DEBUG, and one line says how many partitions fail together,
with the last one's words. It is said again when twice as many fail as it last said, and every
`REPEAT_S` seconds while they go on, so a growing outage is seen growing and a standing one
stays in view.

The operator says the faults of Event Hubs and of the checkpoint store that many consumers meet
together the same way (`handlers.dependencylines`), with words of its own (``said_again``).

Bounded: one entry per partition of the pod (per consumer, for the operator), each dropped
`WINDOW_S` after its last line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: A partition that said a line this recently still counts as failing: longer than the
#: longest pause between two failures of one partition in an outage (its restart's backoff,
#: at most 30 s, or one unanswered link open, 30 s), so that the partitions of one outage stay
#: together, and short enough that two faults a minute apart are told apart.
WINDOW_S = 60.0

#: How often the line for many partitions is said again while they go on failing: rare
#: enough to stay one line in a screenful of logs, often enough that whoever reads them later
#: sees it.
REPEAT_S = 300.0

#: Appended to every line said for many partitions.
SAID_AGAIN = (
    "; each partition's own lines go to DEBUG while several fail together; said again when "
    "twice as many fail, or every %.0f s while they go on"
)


class SharedLines:
    """One kind of per-partition failure line of one pod, said once for the partitions that
    meet it together. ``together`` is a %-format of two arguments: how many partitions, and
    the last partition's own line; ``said_again`` (appended to it) a %-format of one, the
    ``repeat_s``."""

    def __init__(
        self,
        log: logging.Logger,
        together: str,
        *,
        window_s: float = WINDOW_S,
        repeat_s: float = REPEAT_S,
        said_again: str = SAID_AGAIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._together = together + said_again
        self._window_s = window_s
        self._repeat_s = repeat_s
        self._clock = clock
        #: When each partition last said a line; bounded by the pod's partitions.
        self._recent: dict[str, float] = {}
        #: How many partitions the line for many last named (0: not said for this group),
        #: and when.
        self._said_count = 0
        self._said_at = 0.0

    def say(
        self, partition: str, level: int, msg: str, *args: object, now: float | None = None
    ) -> bool:
        """``partition``'s line (``msg % args``), at ``level`` while it fails alone; ``now``
        on the caller's clock (the one given, when None). True: it was said so (alone);
        False: at DEBUG, one of many."""
        now = self._clock() if now is None else now
        self._recent = {p: t for p, t in self._recent.items() if now - t < self._window_s}
        self._recent[partition] = now
        count = len(self._recent)
        if count == 1:
            self._said_count = 0  # alone: a group that forms later is said afresh
            self._log.log(level, msg, *args)
            return True
        self._log.debug(msg, *args)
        if (
            self._said_count == 0
            or count >= 2 * self._said_count
            or now - self._said_at >= self._repeat_s
        ):
            self._said_count, self._said_at = count, now
            self._log.log(level, self._together, count, msg % args, self._repeat_s)
        return False
