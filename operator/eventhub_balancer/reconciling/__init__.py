"""The whole decision of one reconcile cycle, pure: `deciding.decide(observation, now=...)`.

A cycle reads the world into an `observations.Observation`, hands it to `deciding.decide`
and writes what the `deciding.Decision` says; the reading and the writing live in
`eventhub_balancer.handlers` (`observing`, `writing`), the orchestration in `handlers.cycles`.
Nothing here does I/O or reads a clock (an import-linter contract in ``.importlinter`` checks
it), so every rule of a cycle is tested with data in and data out (``tests/reconciling``).
docs/architecture.md draws the cycle; docs/operator.md describes what it writes.
"""
