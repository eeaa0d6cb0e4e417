"""The interpreter's switch interval, lowered while a Spark trigger runs.

While a trigger runs, the interpreter hands the GIL over every `TRIGGER_SWITCH_INTERVAL_S`
instead of every 5 ms (`prompt_gil`): the handler thread talks to the JVM in dozens of py4j
round trips per trigger (the handler's own included), and each needs the GIL back for its
answer, which an event loop busy receiving gives up only at its switch interval. Measured on
the 2-core development machine, a trigger of 1,000 events beside a busy Python thread took
580-670 ms instead of 120-140 ms; with the interval at 0.5 ms, 170-250 ms.

Kept apart from ``consumer.triggers`` because it changes a setting of the whole process,
not of one trigger: the interval found is put back once no trigger runs, however many ran at
once.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

#: The interpreter's switch interval while a trigger runs (`prompt_gil`); Python's is 5 ms.
TRIGGER_SWITCH_INTERVAL_S = 0.0005


class _PromptGil:
    """Lowers ``sys.setswitchinterval`` while at least one trigger runs, and puts back the
    interval it found once none does."""

    def __init__(self) -> None:
        self._running = 0
        self._saved = 0.0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        if self._running == 0:
            self._saved = sys.getswitchinterval()
            sys.setswitchinterval(min(self._saved, TRIGGER_SWITCH_INTERVAL_S))
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                sys.setswitchinterval(self._saved)


#: Entered around every trigger's handler call (from the event loop's thread only).
prompt_gil = _PromptGil()
