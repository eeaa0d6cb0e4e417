"""The turns of the operator's calls to Event Hubs and the checkpoint stores, shared fairly
between tenants.

At most `hubclients.CONCURRENT_CALLS` calls are in flight at once, for the whole operator. One
operator serves many tenants (Kubernetes namespaces), each with its own hubs and storage
accounts, and one tenant's calls may each take their whole timeout: a namespace or account
that answers slowly or not at all. With one queue for everybody, a tenant of a few hundred
such consumers kept every turn busy and queued hundreds of calls, and another tenant's cycle
after a pod deletion waited minutes for its one listing of the checkpoint blobs. So the turns
are kept per tenant:

- a tenant may hold every turn but the last `reserved` ones; those go only to tenants that hold
  fewer than `reserved` turns. One tenant, however slow its Azure, leaves the others
  `reserved` turns, free at once;
- when turns are short, the tenants waiting take the freed turns in rotation, one each, in the
  order each first waited; a tenant's own calls keep their order.

So beside one tenant that keeps every turn it may take busy, another tenant's call finds a
turn at once; beside several, it takes the next turn a call in flight frees (each call ends
within its timeout), the tenants waiting served one call each in turn. The wait for a turn
does not count against a call's timeout.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Hashable

#: No tenant may take a turn now (`FairGate._hand_on`).
_NOBODY = object()


class FairGate:
    """``capacity`` turns shared by tenants (any hashable key; None for callers that name
    none, such as the CLI), as the module describes."""

    def __init__(self, capacity: int, *, reserved: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"a gate needs at least one turn, got {capacity}")
        self.capacity = capacity
        #: the turns kept for tenants holding fewer than this many
        self.reserved = capacity // 4 if reserved is None else min(reserved, capacity - 1)
        self.busy = 0
        self._held: collections.Counter[Hashable] = collections.Counter()
        #: per tenant, its calls waiting for a turn, in order; tenants in rotation order
        self._waiting: dict[Hashable, collections.deque[asyncio.Future[None]]] = {}
        #: the most turns any one tenant held at once, for the tests
        self.most_held = 0

    def held(self, tenant: Hashable) -> int:
        return self._held[tenant]

    @property
    def waiting(self) -> int:
        return sum(len(calls) for calls in self._waiting.values())

    @contextlib.asynccontextmanager
    async def turn(self, tenant: Hashable) -> AsyncIterator[None]:
        """Hold one of ``tenant``'s turns while the block runs."""
        if tenant not in self._waiting and self._may_take(tenant):
            self._take(tenant)
        else:
            called: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(tenant, collections.deque()).append(called)
            try:
                await called
            except asyncio.CancelledError:
                if called.done() and not called.cancelled():
                    self._give_back(tenant)  # the turn came with the cancellation
                else:
                    self._withdraw(tenant, called)
                raise
        try:
            yield
        finally:
            self._give_back(tenant)

    def _may_take(self, tenant: Hashable) -> bool:
        if self.busy >= self.capacity:
            return False
        return self._held[tenant] < self.reserved or self.busy < self.capacity - self.reserved

    def _take(self, tenant: Hashable) -> None:
        self.busy += 1
        self._held[tenant] += 1
        self.most_held = max(self.most_held, self._held[tenant])

    def _give_back(self, tenant: Hashable) -> None:
        self.busy -= 1
        self._held[tenant] -= 1
        if not self._held[tenant]:
            del self._held[tenant]
        self._hand_on()

    def _withdraw(self, tenant: Hashable, called: asyncio.Future[None]) -> None:
        calls = self._waiting.get(tenant)
        if calls is not None and called in calls:
            calls.remove(called)
            if not calls:
                del self._waiting[tenant]
        self._hand_on()

    def _hand_on(self) -> None:
        """Give the free turns to the tenants waiting, one each in rotation; a tenant served
        goes to the back of the rotation."""
        while self.busy < self.capacity:
            tenant = next((t for t in self._waiting if self._may_take(t)), _NOBODY)
            if tenant is _NOBODY:  # None is a tenant too (callers that name none)
                return
            calls = self._waiting.pop(tenant)
            called = calls.popleft()
            if calls:
                self._waiting[tenant] = calls  # to the back of the rotation
            if called.done():
                continue  # cancelled, its caller not yet told: it withdraws nothing more
            self._take(tenant)
            called.set_result(None)
