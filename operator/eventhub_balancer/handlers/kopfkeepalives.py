"""kopf's peering, kept alive through an API server that refuses its writes for a while.

With peering (``--peering``: two replicas, one active), each replica renews its entry in the
KopfPeering object every 5 to 10 s, and renews it, or removes the entries of replicas gone,
when the object changes; an entry not renewed within its lifetime
(`kopfwiring.PEERING_LIFETIME_SECONDS`) counts as a replica gone. kopf 1.45 retries each of
these writes through its error backoffs, about 54 s, and then gives up on more than the
write: the keep-alive task ends for good while the replica runs on, and a write made on a
change of the object is taken for a framework bug that stops the whole operator. Replayed
against the local API server, with two replicas whose writes to the KopfPeering object were
answered 429 (API Priority and Fairness) for 70 s: both stopped, and no operator was left.

`install` makes such a write that kopf gave up on one warning: the next renewal comes at the
keep-alive's usual pace, and the entries of replicas gone are removed at the next change. The
entry lives again as soon as the API server takes it; while it does not, the standby may take
the active replica for gone and act too, which the preconditions on every write keep safe,
until the active replica's next renewal pauses it. A kopf that no longer writes through
``peering.touch`` and ``peering.clean`` fails `tests/handlers/test_kopf_keepalives.py`, so
an upgrade cannot drop the fix silently.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kopf._cogs.clients import errors as kopf_errors
from kopf._core.engines import peering

logger = logging.getLogger(__name__)

Write = Callable[..., Awaitable[None]]

#: kopf's own writes to the peering object, which `install` wraps.
STOCK_TOUCH: Write = peering.touch
STOCK_CLEAN: Write = peering.clean


def _kept(write: Write, what: str) -> Write:
    async def kept(**kwargs: Any) -> None:
        try:
            await write(**kwargs)
        except Exception as e:  # kopf's API errors, a lost connection, a timeout: transient
            if isinstance(e, kopf_errors.APIError):
                why = f"{e.status}: {e.message or e}"
            else:
                why = f"{type(e).__name__}: {e}"
            logger.warning(
                "the peering object could not be written (%s; %s); trying again later", what, why
            )

    return kept


#: kopf's renewal of this replica's entry, and its removal of the entries of replicas gone;
#: each a warning when it fails after kopf's own retries.
touch = _kept(STOCK_TOUCH, "this replica's entry")
clean = _kept(STOCK_CLEAN, "the entries of replicas gone")


def install() -> None:
    """Make kopf's peering write through `touch` and `clean` (idempotent; before it starts)."""
    peering.touch = touch  # type: ignore[assignment]
    peering.clean = clean  # type: ignore[assignment]
