"""A fault of Event Hubs or of the checkpoint store that many consumers meet together, said
once for them.

Each consumer's cycles say its dependency's fault as the cycles' own faults are said
(`cyclefaults`): a warning when it starts or its reason changes, a reminder every 10 minutes,
and one line when it answers again (`observing.told`). Consumers that name one Event Hubs
namespace or one storage account meet its outage together, and each of them said so: an
operator running 200 consumers on one namespace wrote 200 warnings as the outage began, 200
more at each reminder, and 200 lines at INFO as it ended, among which any other line was lost.

`DependencyLines` says them as a pod says the failures its partitions meet together
(`adapters.sharedlines`). While one consumer says a dependency's fault with a reason (the
condition's: ``EventHubUnreachable``, ``SecretNotFound`` ...), its line is said as it comes.
Once several do within `sharedlines.WINDOW_S`, each consumer's own line goes to DEBUG, and one
line says how many consumers fail together, with the last one's words, again as their number
doubles. A consumer whose fault is its own (a reason no other consumer meets meanwhile: its
own Secret missing) is said alone, whatever the others meet. The ends ("answers again") are
said the same way. Each consumer's condition and Warning Event still name its own fault:
`kubectl get eventhubconsumers` shows every one of them.

Bounded: one `sharedlines.SharedLines` per dependency and reason (the conditions' reasons, a
fixed set), each with one entry per consumer, dropped `sharedlines.WINDOW_S` after its line.
"""

from __future__ import annotations

import logging

from eventhub_balancer.adapters import sharedlines
from eventhub_balancer.handlers import cyclefaults

logger = logging.getLogger(__name__)

#: The line for consumers failing together: how many, the dependency, the reason, and the last
#: one's own line.
FAILED = "%d consumers fail together ({what}: {reason}), the last: %s"
FAILED_AGAIN = (
    "; each consumer's own lines go to DEBUG while several fail together; said again when "
    "twice as many fail, or every %.0f s while they go on"
)
#: The line for consumers whose dependency answers again together.
ANSWERED = "%d consumers: {what} answers again together, the last: %s"
ANSWERED_AGAIN = (
    "; each consumer's own line goes to DEBUG while several say it together; said again when "
    "twice as many do, or after %.0f s"
)


class DependencyLines:
    """The lines of the dependencies' faults of one operator's consumers, each said once for
    the consumers that meet it together. Keyed by what a consumer's key names (``shop/orders``)."""

    def __init__(self) -> None:
        #: One per dependency and reason (``None``: its end), made when first said.
        self._kinds: dict[tuple[str, str | None], sharedlines.SharedLines] = {}

    def failed(
        self, consumer: str, what: str, reason: str, msg: str, *args: object, now: float
    ) -> None:
        """``consumer``'s warning (``msg % args``) that ``what`` fails with ``reason``, at wall
        time ``now``: said, or counted into the line for the consumers failing together."""
        together = FAILED.format(what=what, reason=reason)
        lines = self._kind((what, reason), together, cyclefaults.REMIND_SECONDS, FAILED_AGAIN)
        lines.say(consumer, logging.WARNING, msg, *args, now=now)

    def answered(self, consumer: str, what: str, msg: str, *args: object, now: float) -> None:
        """``consumer``'s line that ``what`` answers again, at INFO, or counted into the line
        for the consumers it answers again together."""
        together = ANSWERED.format(what=what)
        lines = self._kind((what, None), together, sharedlines.WINDOW_S, ANSWERED_AGAIN)
        lines.say(consumer, logging.INFO, msg, *args, now=now)

    def _kind(
        self, key: tuple[str, str | None], together: str, repeat_s: float, said_again: str
    ) -> sharedlines.SharedLines:
        lines = self._kinds.get(key)
        if lines is None:
            lines = sharedlines.SharedLines(
                logger, together, repeat_s=repeat_s, said_again=said_again
            )
            self._kinds[key] = lines
        return lines
