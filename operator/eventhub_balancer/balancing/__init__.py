"""The pure planner: who should own which partition, and how to get there safely.

This package holds no I/O, no clock and no Kubernetes or Azure client (an import-linter
contract checks it), so that every rule of the planner can be tested with plain data and
replayed from a scenario file. The operator feeds it what it observed; `ehb plan` feeds it a
JSON scenario. Entry points: `planning.plan(scenario) -> Plan`, `scenarios.load/parse/dump_plan`.
"""
