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

A peering object that does not exist (``--peering`` naming one never created, or another
name than the chart's) keeps the replica paused: kopf starts it paused and resumes it only at
an event of the object, and says at DEBUG only that its renewal found nothing. The operator
ran, served no consumer, and said nothing at the default level. `Renewals` renews as kopf does
and says so: one line at the first renewal that finds nothing, a warning with what to do at
the second in a row, again every `MISSING_REMINDER_SECONDS` while it is missing, and one line
when it is there again. The first is not a warning: a Helm install creates the object beside
the operator's pods, and a pod that starts first finds nothing once (seen on the real control
plane: the object 0.8 s late). That first miss is looked for again every `FIRST_MISS_PACE_S`
for `FIRST_MISS_WAIT_S`, so that the entries that pause all replicas but one are written
right after the object, not at the next renewal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kopf._cogs.clients import errors as kopf_errors
from kopf._cogs.clients import patching
from kopf._cogs.configs import configuration
from kopf._cogs.structs import patches, references
from kopf._core.engines import peering

logger = logging.getLogger(__name__)

Write = Callable[..., Awaitable[None]]

#: kopf's own writes to the peering object: `install` puts `Renewals.touch` in the place of
#: the first, which writes the same patch (the tests hold it to that), and wraps the second.
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


#: How often a peering object still missing is said again.
MISSING_REMINDER_SECONDS = 600.0
#: After the first renewal that misses the object, how long it is looked for again, and how
#: often. A Helm install creates it beside the operator's pods, and kopf resumes every replica
#: at its creation, when it holds no entry yet; the entries written within half a second of it
#: pause all replicas but one. Before, the next renewal came 5 to 10 s later, and every replica
#: acted until then (7 s on the real control plane). Ten requests at most, once a miss.
FIRST_MISS_WAIT_S = 5.0
FIRST_MISS_PACE_S = 0.5


class Renewals:
    """kopf's renewal of this replica's entry (``peering.touch`` of kopf 1.45: the same patch,
    through the same call), saying when the peering object is missing and when it is back."""

    def __init__(self) -> None:
        #: Where the object is missing: {its kind and name: when the warning was last said,
        #: None while only one renewal has missed it}.
        self.missing: dict[str, float | None] = {}

    async def touch(
        self,
        *,
        identity: peering.Identity,
        settings: configuration.OperatorSettings,
        resource: references.Resource,
        namespace: references.Namespace,
        lifetime: int | None = None,
    ) -> None:
        entry = peering.Peer(
            identity=identity,
            priority=settings.peering.priority,
            lifetime=settings.peering.lifetime if lifetime is None else lifetime,
        )
        patch = patches.Patch()
        patch |= {"status": {identity: None if entry.is_dead else entry.as_dict()}}
        name = settings.peering.name

        async def write() -> bool:
            found, _ = await patching.patch_obj(
                settings=settings,
                resource=resource,
                namespace=namespace,
                name=name,
                patch=patch,
                logger=peering.logger,
                silent=True,
            )
            return found is not None

        found = await write()
        if lifetime == 0:  # the replica's leaving, when nothing waits on the object
            return
        where = object_name(namespace, name)
        first_miss = not found and where not in self.missing
        self.tell(found, where)
        if first_miss:  # created beside this replica, maybe: looked for again at once
            loop = asyncio.get_running_loop()
            until = loop.time() + FIRST_MISS_WAIT_S
            while not found and loop.time() < until:
                await asyncio.sleep(FIRST_MISS_PACE_S)
                found = await write()
            if found:
                self.tell(found, where)

    def tell(self, found: bool, where: str) -> None:
        now = asyncio.get_running_loop().time()
        if found:
            if where in self.missing:
                del self.missing[where]
                logger.info("the peering object %s exists: this replica takes part again", where)
            return
        if where not in self.missing:
            self.missing[where] = None
            logger.info(
                "the peering object %s is not there yet: this replica waits for it, paused",
                where,
            )
            return
        said = self.missing[where]
        if said is not None and now - said < MISSING_REMINDER_SECONDS:
            return
        self.missing[where] = now
        logger.warning(
            "the peering object %s does not exist: this replica stays paused, and serves no "
            "consumer, until it does; create it (manifests/peering/peering.yaml, or the chart's "
            "peering.enabled) or run the operator with --standalone",
            where,
        )


def object_name(namespace: str | None, name: str) -> str:
    """The peering object as kubectl names it."""
    return f"KopfPeering {namespace}/{name}" if namespace else f"ClusterKopfPeering {name}"


def install() -> None:
    """Make kopf's peering write through `Renewals` and a kept `clean` (before it starts):
    each write a warning when it fails after kopf's own retries."""
    peering.touch = _kept(Renewals().touch, "this replica's entry")  # type: ignore[assignment]
    peering.clean = _kept(STOCK_CLEAN, "the entries of replicas gone")  # type: ignore[assignment]
