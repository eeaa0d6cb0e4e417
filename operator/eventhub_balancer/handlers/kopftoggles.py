"""kopf's readiness toggles, made linear in the number of objects at start.

Before kopf starts a daemon or any handler but the indexes, every object of every indexed kind
must be indexed: kopf keeps one toggle per object of the first listing in a set
(``kopf._cogs.aiokits.aiotoggles.ToggleSet``), and every handler waits on the set's condition
until all are dropped. kopf 1.45 wakes every waiter whenever a toggle is added or dropped,
although the set's state changes only when the last one goes. So a start over n objects
wakes waiters about n² times: 1,000 objects took 2.3 s of CPU, 4,000 took 122 s
(`tests/handlers/test_kopftoggles.py` shows the count), and an operator over 1,000 consumers
(9,000 pods, ConfigMaps and CRs) did not get through its start in 10 minutes.

`QuietToggleSet` wakes the waiters only when the set's state changes, which is all a waiter
waits for; `install` puts it where kopf builds its sets, before the operator starts. A kopf
that no longer builds them through ``aiotoggles.ToggleSet`` fails the test named above, so an
upgrade cannot drop the fix silently.
"""

from __future__ import annotations

from collections.abc import Iterable

from kopf._cogs.aiokits import aiotoggles


class QuietToggleSet(aiotoggles.ToggleSet):
    """kopf's ToggleSet, whose changes of membership wake waiters only when ``is_on`` flips."""

    async def make_toggle(
        self, __val: bool = False, *, name: str | None = None
    ) -> aiotoggles.Toggle:
        toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
        async with self._condition:
            before = self.is_on()
            self._toggles.add(toggle)
            if self.is_on() != before:
                self._condition.notify_all()
        return toggle

    async def drop_toggle(self, toggle: aiotoggles.Toggle) -> None:
        await self.drop_toggles((toggle,))

    async def drop_toggles(self, toggles: Iterable[aiotoggles.Toggle]) -> None:
        async with self._condition:
            before = self.is_on()
            self._toggles.difference_update(toggles)
            if self.is_on() != before:
                self._condition.notify_all()


def install() -> None:
    """Make kopf build its toggle sets as `QuietToggleSet` (idempotent; before it starts)."""
    aiotoggles.ToggleSet = QuietToggleSet  # type: ignore[misc]
