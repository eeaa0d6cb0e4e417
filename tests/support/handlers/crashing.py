"""A handler that kills its own process on one event, as a segfault or the OOM killer does.

``EHB_TEST_CRASH_AT`` names the event (``partition:sequence_number``): a batch that holds it
ends the process with SIGKILL before anything of the batch is done, on every attempt. Every
other batch is recorded as `recording` records it (``partition sequence_number`` lines in
``EHB_TEST_RECORD_DIR/<pod>.log``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from eventhub_balancer.consumer import BatchContext, Event


def process(events: Sequence[Event], context: BatchContext) -> None:
    partition, _, sequence_number = os.environ["EHB_TEST_CRASH_AT"].partition(":")
    if any(e.partition == partition and e.sequence_number == int(sequence_number) for e in events):
        os.kill(os.getpid(), signal.SIGKILL)
    directory = os.environ["EHB_TEST_RECORD_DIR"]
    lines = "".join(f"{e.partition} {e.sequence_number}\n" for e in events)
    with open(os.path.join(directory, f"{context.pod}.log"), "a") as out:
        out.write(lines)
