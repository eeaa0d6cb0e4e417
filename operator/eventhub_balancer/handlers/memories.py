"""What the operator keeps about one consumer between cycles, apart from the cycle itself.

The daemon in `registering` holds one `Memory` per consumer and the cycle's readers in
`observing` update it; a module of its own, so that neither has to import the other.
"""

from __future__ import annotations

import dataclasses

from eventhub_balancer.contracts import conditions


@dataclasses.dataclass
class Memory:
    """What the operator remembers about one consumer between cycles: nothing it needs.

    All of it is an optimisation (backoff timers, the last probe): a restarted operator
    starts with an empty Memory and reaches the same decisions.
    """

    hub_retry_at: float = 0.0
    hub_backoff: float = 0.0
    hub_fault: conditions.Condition | None = None
    store_checked_at: float = -1e18
    store_retry_at: float = 0.0
    store_backoff: float = 0.0
    store_condition: conditions.Condition | None = None
    stored_epochs: dict[str, int] = dataclasses.field(default_factory=dict)
    stored_sequences: dict[str, int] = dataclasses.field(default_factory=dict)
    pods: frozenset[str] = frozenset()
    generation: int = 0
