"""The chaos run's handler: records batches like the demo's, and misbehaves on cue.

Two faults live in the handler because only the handler can commit them:

- a *poison* event (property ``chaos: poison``, marked by the producer) makes every batch that
  holds it raise, on every attempt, as a malformed record would. The pod's failure policy
  (``spec.processing``) must contain it to its partition: retry, then dead-letter or park;
- a *hang*: the first batch that claims a hang ticket (a file ``<record dir>/hang-<n>``
  that the run creates) sleeps ``EHB_CHAOS_HANG_SECONDS`` before it records and returns, as
  a handler stuck on a slow dependency would. Claiming is a rename, so exactly one batch in
  the whole fleet takes each ticket; the taker writes the time its hang began into it.

A batch is recorded only when it succeeds, so a failed attempt neither counts as processed
nor as a duplicate; a dead-lettered batch is accounted for by the dead-letter blobs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from eventhub_balancer_devstack import recording

#: The application property that marks an event, and its value for a poison event.
PROPERTY = "chaos"
POISON = "poison"
#: How long a hanging batch sleeps (seconds), passed to the pods in their environment.
ENV_HANG_SECONDS = "EHB_CHAOS_HANG_SECONDS"
#: The name prefix of hang tickets in the record directory.
HANG_TICKET = "hang-"
#: The suffix of a taken ticket; it holds the time the hang began.
TAKEN = ".taken"
DEFAULT_HANG_SECONDS = 5.0


class PoisonEvent(Exception):
    """The batch holds an event the chaos run marked as poison."""


class _Event(Protocol):
    @property
    def sequence_number(self) -> int: ...

    @property
    def properties(self) -> Mapping[Any, Any]: ...


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def is_poison(event: _Event) -> bool:
    """The event carries ``chaos: poison`` (the SDK may hand keys and values over as bytes)."""
    properties = event.properties or {}
    return any(_text(k) == PROPERTY and _text(v) == POISON for k, v in properties.items())


def claim_hang_ticket(directory: Path) -> str | None:
    """Take one hang ticket if there is one (None otherwise); one taker per ticket."""
    for ticket in sorted(directory.glob(f"{HANG_TICKET}*")):
        if ticket.name.endswith(TAKEN):
            continue
        taken = ticket.with_name(ticket.name + TAKEN)
        try:
            ticket.rename(taken)
        except OSError:
            continue  # another process took it first
        # When the hang began (wall clock), for the run: the fault ends when the hang does.
        taken.write_text(f"{time.time():.3f}")
        return ticket.name
    return None


def process(events: Sequence[_Event], context: Any) -> None:
    """Raise on poison, hang once per ticket, else record the batch as the demo does."""
    directory = Path(os.environ[recording.ENV_RECORD_DIR])
    poison = [e.sequence_number for e in events if is_poison(e)]
    if poison:
        raise PoisonEvent(
            f"partition {context.partition}: poison event(s) at sequence number(s) {poison}"
        )
    if claim_hang_ticket(directory) is not None:
        time.sleep(float(os.environ.get(ENV_HANG_SECONDS, DEFAULT_HANG_SECONDS)))
    recording.process(events, context)


def hangs_began(directory: Path) -> list[float]:
    """When each taken ticket's hang began (wall clock); a ticket taken this very moment,
    whose time is not written yet, counts as now."""
    result = []
    for taken in directory.glob(f"{HANG_TICKET}*{TAKEN}"):
        try:
            result.append(float(taken.read_text() or time.time()))
        except (OSError, ValueError):
            result.append(time.time())
    return result


def cancel_hangs(directory: Path) -> int:
    """Remove the tickets nobody took yet (the run's faults are over); returns how many."""
    count = 0
    for ticket in directory.glob(f"{HANG_TICKET}*"):
        if not ticket.name.endswith(TAKEN):
            ticket.unlink(missing_ok=True)
            count += 1
    return count
