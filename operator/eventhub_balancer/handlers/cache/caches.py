"""The cache's parts over one `seen.Seen`, as an operator (or a test) holds them."""

from __future__ import annotations

import time
from collections.abc import Callable

from eventhub_balancer.contracts import labelselectors
from eventhub_balancer.handlers import ports
from eventhub_balancer.handlers.cache import relisting, seen, serving, tracking

Key = seen.Key


class Cache:
    """The parts over one `seen.Seen`: ``watch`` (`tracking.Tracking`, `ports.WatchPort`) for
    the watch handlers, ``following`` (`tracking.Following`, `ports.RosterPort`) for the
    daemons, ``view`` (`serving.CachedKube`, `ports.KubePort`) for the cycles, and
    ``relisting`` (`relisting.Relisting`), which the daemons run while any consumer runs. With
    ``pod_scope`` (``ehb operator --pod-selector``), every part sees only the pods it selects."""

    def __init__(
        self,
        api: ports.ListingPort,
        *,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[Key], None] = lambda key: None,
        pod_scope: labelselectors.Selector | None = None,
    ) -> None:
        self.seen = seen.Seen(pod_scope=pod_scope)
        self.watch = tracking.Tracking(self.seen)
        self.following = tracking.Following(self.seen, clock=clock)
        self.view = serving.CachedKube(api, shared=self.seen, clock=clock, wake=wake)
        self.ghosts = relisting.Ghosts(
            api, self.seen, peers=self.view.peers, wake=wake, clock=clock
        )
        self.relisting = relisting.Relisting(
            api, self.seen.rosters, wake=wake, pod_scope=pod_scope, ghosts=self.ghosts
        )
