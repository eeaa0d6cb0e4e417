"""The operator's view of the cluster: each consumer's roster, kept by the watch handlers.

kopf watches EventHubConsumers, pods and the assignment ConfigMaps. Their event handlers
(`kopfwiring`, through `registering.Operator.observed`) hand every event to `tracking`, which
offers the body to the roster of each consumer it may concern (`rosters.Roster`, one shelf per
kind: `shelves`, the one cache mechanism, newest version wins; `rosters.Rosters` finds the
rosters a body concerns) and says which rosters changed, so that exactly those consumers are
woken. A cycle reads its consumer's roster through `serving.CachedKube`: a steady state costs
the API server nothing.

Safety does not rest on this view being right. Every write a decision makes goes after the
status write conditioned on the CR's resourceVersion the decision was read from (or carries a
precondition of its own: a ConfigMap's version, create only), so a stale view costs a 409,
and a 409 makes the consumer read afresh (`tracking.Following.refresh`). The view is also
read afresh, per consumer and per kind, when it may be stale:

- after kopf lists a kind again (a watch error, a 410; told by a listing event after watch
  events, or of a name already listed: `tracking.Tracking`): the next read of each roster
  lists its scope once (`shelves.Shelf.resync` removes only what the listing lacks and is no
  newer);
- when a roster starts, its ConfigMaps: kopf's index keeps what vanished while the watch was
  away, and a re-list that lists nothing sends no event (`tracking.Following.follow`);
- when the watch does not echo one of the operator's own writes within
  `rosters.ECHO_SECONDS`: that watch lags or stalled (`tracking.Following.follow`);
- every `relisting.RELIST_SECONDS`, the pods of each namespace: the operator never writes
  pods, so nothing else tells it that a pod watch lags (`relisting`);
- every `relisting.CONFIGMAP_RELIST_SECONDS`, the managed ConfigMaps of each namespace: a
  re-list that lists none sends no event, and kopf's index keeps what it lacks (`relisting`).

The modules, from the whole down to its parts (an import-linter contract holds the order):
`caches` builds the parts over one `seen.Seen`; `tracking` (`ports.WatchPort` and
`ports.RosterPort`), `serving` (`ports.KubePort`, and the kept Secret values) and `relisting`
act on it; `seen` is what they share; `rosters` (each consumer's roster, and which rosters a
body concerns) and `shelves` (the newest-version rule, and kopf's index keys) hold the bodies.
"""
