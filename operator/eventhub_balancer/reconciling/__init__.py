"""The whole decision of one reconcile cycle, pure: `deciding.decide(observation, carry, now=...)`.

A cycle reads the world into an `observations.Observation`, hands it to `deciding.decide`
with the `decisions.Carry` the last decision handed on, and writes what the
`decisions.Decision` says; the reading and the writing live in `eventhub_balancer.handlers`
(`observing`, `writing`), the orchestration in `handlers.cycles`, which keeps the carry.
Nothing here does I/O, reads a clock or keeps anything between calls (import-linter contracts
in ``.importlinter`` check the first two and lay the modules out in layers, from `deciding`
down to `observations`; ``tests/reconciling/test_module_state.py`` checks the third), so
every rule of a cycle is tested with data in and data out (``tests/reconciling``).
docs/architecture.md draws the cycle; docs/operator.md describes what it writes.
"""
