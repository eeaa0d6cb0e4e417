"""What a pod watch that lags has not delivered yet, found within `RELIST_SECONDS`.

A watch that goes silent is noticed: kopf reconnects it (`kopfwiring.WATCH_INACTIVITY_SECONDS`).
A watch whose events come late is not, unless something tells: the operator's own writes do
for the CRs and the ConfigMaps (their echoes are due within `rosters.ECHO_SECONDS`), but the
operator never writes pods, and a pod deleted while nothing else happens gives no sign at all.
Behind a watch 65 s late, a deleted pod's partitions waited more than 100 s.

So every `RELIST_SECONDS` the operator lists the pods afresh, one LIST per namespace it has
consumers in, whatever their number, and offers each pod to the rosters that hold or select
it (`rosters.Rosters.relisted`): what the listing lacks and is no newer leaves, what it has
newer replaces the older body, and each consumer whose roster changed is woken. A pod
deleted or relabelled under a lagging watch leaves its consumer within that bound, and the
listing is also what tells a decision that a pod the record names is gone
(`observations.Departures`). The LIST asks only for the pods some consumer there may select
(`covering`): in a namespace shared with other workloads, their pods are neither sent nor
parsed every 10 s.

The cost, documented in docs/operator.md: one LIST of a namespace's pods per namespace and
`RELIST_SECONDS`, beside the cycles; a steady cycle still makes no request. A failed listing
is logged and tried again at the next turn: the rosters stay as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable, Iterable

from eventhub_balancer import errors
from eventhub_balancer.contracts import labelselectors
from eventhub_balancer.handlers import ports
from eventhub_balancer.handlers.cache import rosters, shelves

logger = logging.getLogger(__name__)

#: How often each namespace's pods are listed afresh: a pod watch that lags, however late,
#: holds a change back at most this long (plus the listing and a cycle).
RELIST_SECONDS = 10.0
#: Every pod of a namespace: the rosters pick what their selectors match.
EVERY_POD = labelselectors.Selector()
#: The most values one ``key in (...)`` covering selector names; beyond, every pod is listed
#: (a query string stays a few KB long).
MAX_COVERED = 100

Key = tuple[str, str]


class Relisting:
    """The pods of every namespace with consumers, listed afresh every `RELIST_SECONDS`."""

    def __init__(
        self,
        api: ports.ListingPort,
        kept: rosters.Rosters,
        *,
        wake: Callable[[Key], None],
        seconds: float = RELIST_SECONDS,
        pod_scope: labelselectors.Selector | None = None,
    ) -> None:
        self.api = api
        self.kept = kept
        #: the pods the operator watches at all (``--pod-selector``; None: every pod)
        self.pod_scope = pod_scope
        self.wake = wake
        self.seconds = seconds
        #: LISTs made so far: what the relisting costs, counted apart from the cycles'.
        self.listings = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Relist from now on, if not yet (each daemon asks as it starts)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="ehb-relisting")

    def stop(self) -> None:
        """No more relisting (the last daemon stopped): a listing in flight is cancelled."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.seconds)
            await self.relist()

    async def relist(self) -> list[Key]:
        """List every namespace's pods once; the consumers woken."""
        woken: list[Key] = []
        for namespace in sorted({ns for ns, _ in self.kept.by_key}):
            try:
                woken += await self.relist_namespace(namespace)
            except errors.EventHubBalancerError as e:
                logger.warning("pods in %s were not listed afresh: %s", namespace, e)
        return woken

    async def relist_namespace(self, namespace: str) -> list[Key]:
        """List ``namespace``'s pods and offer them to its rosters; the consumers woken."""
        held = [r for (ns, _), r in self.kept.by_key.items() if ns == namespace]
        selector = covering([r.lookup for r in held]).both(self.pod_scope)
        asked = {(r.namespace, r.name): r.shelves[shelves.PODS] for r in held}
        with contextlib.ExitStack() as asking:
            for roster in held:
                asking.enter_context(roster.asking(shelves.PODS))
            self.listings += 1
            listing = await self.api.list_selected_pods(namespace=namespace, selector=selector)
            changed = self.kept.relisted(
                namespace,
                shelves.PODS,
                listing.items,
                at=shelves.number(listing.metadata.get("resourceVersion")),
                keys=lambda body: shelves.pod_keys(
                    namespace, (body.get("metadata") or {}).get("labels") or {}
                ),
                asked=asked,
            )
        if changed:
            logger.info(
                "%s: pods listed afresh showed what the pod watch had not delivered yet: %s",
                namespace,
                ", ".join(name for _, name in changed),
            )
        for key in changed:
            self.wake(key)
        return changed


def covering(lookups: Iterable[Hashable]) -> labelselectors.Selector:
    """One selector that matches every pod the rosters of one namespace may select, given each
    one's lookup key (`shelves.pod_lookup`: a label its selector requires, or the namespace
    alone): ``key in (their values)`` when they all require a value of the same label key,
    else every pod. A pod a roster holds matches its selector, so it matches this one: what
    the listing lacks has left every roster that held it."""
    values: set[str] = set()
    keys: set[str] = set()
    for lookup in lookups:
        if lookup is None:
            continue  # a consumer without a selector holds no pods
        if not isinstance(lookup, tuple) or len(lookup) != 3:
            return EVERY_POD
        _namespace, key, value = lookup
        keys.add(key)
        values.add(value)
    if len(keys) != 1 or len(values) > MAX_COVERED:
        return EVERY_POD
    [key] = keys
    requirement = labelselectors.LabelRequirement(
        key=key, operator="In", values=tuple(sorted(values))
    )
    return labelselectors.Selector(match_expressions=(requirement,))
