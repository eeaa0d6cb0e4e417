"""The EventHubConsumer's status as the operator writes it: its raw shape, typed.

Kept apart from ``contracts.specs``, which reads the spec (what the user wants), because the
status is what the operator observed: it is built by ``reconciling.statuses`` and read back
by a restarted operator (``status.assignment``, ``status.epochs``), by the CLI and by
``kubectl``, and nothing validates it the way a spec is validated. The CRD's schema in
``crds/`` is the source of truth; these `TypedDict`s only let mypy check the code that
builds and reads it.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ConsumerStatusBody(TypedDict, total=False):
    pod: str
    ready: bool
    state: str
    partitions: list[str]
    revoking: list[str]


class HandoffBody(TypedDict, total=False):
    partition: str
    # "from" is a keyword: the status uses the key "from", built with a dict literal.
    epoch: int
    since: str


class ConditionBody(TypedDict, total=False):
    type: str
    status: str
    observedGeneration: int
    lastTransitionTime: str
    reason: str
    message: str


class AssignmentEntryBody(TypedDict, total=False):
    """One partition in ``status.assignment``: the operator's own record of who owns it."""

    partition: str
    pod: str
    podUid: str
    epoch: int
    state: str
    since: str


class StatusBody(TypedDict, total=False):
    consumerUid: str  # the EventHubConsumer it was written for (a restored one is another)
    observedGeneration: int
    partitionCount: int | None  # None: no partition list read yet (the field removed)
    memberCount: int
    consumers: list[ConsumerStatusBody]
    handoffs: list[dict[str, Any]]
    epochs: dict[str, int]
    assignment: list[AssignmentEntryBody]
    movesTotal: int
    lastRebalanceTime: str
    conditions: list[ConditionBody]
