"""Stalls of the pod's event loop, said in the log with what causes them and what they cost.

Everything the pod does but run a plain handler happens on one event loop: receiving,
checkpointing, releasing, acknowledging, and answering the kubelet's probes. An ``async def``
handler that calls blocking code (``time.sleep``, a blocking HTTP or database client) stops
that loop for as long as the call takes, and so does a process that is paused (CPU limits
throttled, a frozen container, a node under pressure). A probe that gets no answer within its
timeout fails; failing long enough makes the pod NotReady, and past ``podGraceSeconds`` the
operator moves its partitions, at a higher epoch, with the handler calls in flight processed
twice (a batch received before the stall is checked first: `confirm`).
The pod then holds nothing, answers again, turns Ready and gets its share back: the partitions
go back and forth, and nothing in the pod's log said why. So a loop that did not turn for
`STALL_S` is said in a WARNING (at most one per `REPEAT_S`, the others counted into it),
naming the async handler when the handler is one.

The runtime's own loop measures it: each turn waits `runtime.TICK_S` at most, so a wait that
ended much later than that was a loop that did not turn. No timer of its own: the fake-time
tests see the same timers as before, and fake time never stalls.
"""

from __future__ import annotations

import logging
from typing import Final

from eventhub_balancer import errors
from eventhub_balancer.consumer import ports
from eventhub_balancer.contracts import conditions

logger = logging.getLogger(__name__)

#: A turn this much later than asked is a stall: most of a probe's timeout (the consumer
#: chart's readiness probe gives 3 s), far above a busy loop's usual lateness.
STALL_S: Final = 2.0
#: At most one warning this often; the stalls between are counted into the next one.
REPEAT_S: Final = 60.0


async def confirm(store: ports.Checkpoints, partition: str, epoch: int) -> None:
    """Before the handler gets a batch received before a stall: raise `errors.OwnershipLost`
    when a higher epoch fenced ``partition`` meanwhile. A paused pod's partitions move past
    podGraceSeconds, and the batch its receiver held was then handed to the handler the moment
    the pod ran again, before anything told it so: processed twice. One read of the blob."""
    current = await store.keep(partition)  # the blob as stored, whoever holds it
    if current is not None and current.epoch > epoch:
        raise errors.OwnershipLost(partition, epoch, current.epoch, current.owner_id)


def handler_is_async(processor: object) -> bool:
    """Whether the handler runs on the event loop (``async def``), through tracing too."""
    while processor is not None:
        if getattr(processor, "is_async", False) is True:
            return True
        processor = getattr(processor, "inner", None)
    return False


class LoopStalls:
    """Counts the loop's stalls and says them."""

    def __init__(self, *, async_handler: bool) -> None:
        self.async_handler = async_handler
        #: Every stall seen, and the longest, for the life of the process.
        self.count = 0
        self.longest = 0.0
        self._unsaid = 0
        self._unsaid_longest = 0.0
        self._said_at: float | None = None

    def waited(self, since: float, longest: float, now: float) -> None:
        """A wait begun at ``since`` for ``longest`` seconds at most ended at ``now``."""
        late = now - since - longest
        if late >= STALL_S:
            self.observed(late, now)

    def observed(self, stalled: float, now: float) -> None:
        """A stall of ``stalled`` seconds that ended at ``now`` (the loop's clock)."""
        self.count += 1
        self.longest = max(self.longest, stalled)
        self._unsaid += 1
        self._unsaid_longest = max(self._unsaid_longest, stalled)
        if self._said_at is not None and now - self._said_at < REPEAT_S:
            return
        logger.warning(self._text(stalled))
        self._said_at = now
        self._unsaid = 0
        self._unsaid_longest = 0.0

    def _text(self, stalled: float) -> str:
        again = (
            f" ({conditions.amount(self._unsaid, 'stall')} since the last warning, the longest "
            f"{self._unsaid_longest:.1f} s)"
            if self._said_at is not None
            else ""
        )
        cost = (
            "meanwhile no partition is received, checkpointed or released and the probes get "
            "no answer: a pod NotReady past podGraceSeconds loses its partitions"
        )
        if self.async_handler:
            cause = (
                "the handler is async: blocking calls in it (time.sleep, a blocking client) "
                "stop the loop; await them, or make the handler a plain def (it then runs in "
                "a thread). A paused process (CPU throttling, a frozen container) does the same"
            )
        else:
            cause = (
                "the process was paused (CPU throttling under a tight limit, a frozen "
                "container, a node under pressure): give the container more CPU"
            )
        return f"the event loop did not turn for {stalled:.1f} s{again}; {cost}; {cause}"
