"""The local stack, the demo, chaos and the benchmarks of eventhub-balancer (development only).

Nothing in the product (`eventhub_balancer`) imports this package; it adds the `ehb local`,
`ehb demo`, `ehb bench` and `ehb chart` commands through the `eventhub_balancer.commands`
entry points (`commands/`).
"""
