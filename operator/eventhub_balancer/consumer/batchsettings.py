"""How a partition's events are cut into batches, retried, checkpointed and buffered.

The settings of every partition worker (`partitions.PartitionWorker`), from ``ehb consume``'s
flags, and the bound they put on what a partition holds ahead of its handler under a
backlog (`BatchSettings.most_waiting`).
"""

from __future__ import annotations

import dataclasses

from eventhub_balancer import errors


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchSettings:
    """How batches are cut, retried and checkpointed."""

    batch_size: int = 500
    #: Seconds a batch may wait for more events after its first one arrived.
    max_wait: float = 1.0
    #: 0: checkpoint after every batch; more: at most this often (the release writes the rest).
    checkpoint_interval: float = 0.0
    retry_backoff: float = 0.5
    retry_backoff_max: float = 30.0
    #: A handler call running longer than this is reported ``stuck`` (the pod stays Ready).
    stuck_seconds: float = 120.0
    #: On release, the longest wait for the in-flight batch before abandoning it.
    release_timeout: float = 20.0
    #: Past the release timeout, how long an abandoned handler call that ignores cancellation
    #: (a sync handler's thread) may still run before the pod process exits. Keep the release
    #: timeout plus this below the CR's ``handoffTimeoutSeconds`` (30 s by default), after
    #: which the operator assigns the partition anyway.
    handler_exit_timeout: float = 5.0
    #: Events the receive link may deliver ahead of the runtime's buffer (the SDK's credit).
    prefetch: int = 300

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise errors.InvalidInput("--batch-size", f"{self.batch_size} is less than 1")
        if self.prefetch < 1:
            raise errors.InvalidInput("--prefetch", f"{self.prefetch} is less than 1")
        if self.max_wait <= 0:
            raise errors.InvalidInput("--max-wait", f"{self.max_wait} is not positive")
        if self.checkpoint_interval < 0:
            raise errors.InvalidInput("--checkpoint-interval", "must not be negative")
        if self.stuck_seconds <= 0:
            raise errors.InvalidInput("--stuck-seconds", f"{self.stuck_seconds} is not positive")
        if self.release_timeout <= 0:
            raise errors.InvalidInput(
                "--release-timeout", f"{self.release_timeout} is not positive"
            )
        if self.handler_exit_timeout <= 0:
            raise errors.InvalidInput(
                "--handler-exit-seconds", f"{self.handler_exit_timeout} is not positive"
            )

    @property
    def buffer_limit(self) -> int:
        """Buffered events at which the runtime stops taking events from the SDK."""
        return max(4 * self.batch_size, 2 * self.prefetch)

    @property
    def most_waiting(self) -> int:
        """The most events of one partition received and not yet handed to the handler.

        The runtime's buffer takes one delivery of up to ``prefetch`` events before it stops
        at `buffer_limit`; the SDK below it takes up to ``prefetch`` events off the link in
        one read, and reads again while it holds no more than ``prefetch``.
        """
        return self.buffer_limit - 1 + 3 * self.prefetch
