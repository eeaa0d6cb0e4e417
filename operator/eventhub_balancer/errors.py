"""The project's one error hierarchy.

Adapters wrap the SDKs' exceptions into these (``raise ... from e``); only the kopf handlers
turn them into ``kopf.TemporaryError`` or ``kopf.PermanentError``, and only the CLI turns
them into exit codes. Every message says what happened and, for a user's mistake, what to change.
"""


class EventHubBalancerError(Exception):
    """The base of every error this project raises on purpose."""


class InvalidInput(EventHubBalancerError, ValueError):
    """Input from a user (a scenario, a CR, a flag) is wrong; the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ConfigurationError(EventHubBalancerError):
    """The environment or a referenced object is missing or wrong (a Secret, a pod name)."""


class TransientError(EventHubBalancerError):
    """A dependency failed in a way that may pass: retry later with backoff."""


class EventHubUnreachable(TransientError):
    """Event Hubs could not be reached or refused the request."""


class CheckpointStoreUnreachable(TransientError):
    """Blob Storage could not be reached, or the retry budget ran out."""


class OwnershipLost(EventHubBalancerError):
    """A higher epoch owns the partition now: stop processing it, never retry blindly."""

    def __init__(self, partition: str, our_epoch: int, their_epoch: int, owner: str = "") -> None:
        who = f" by {owner}" if owner else ""
        super().__init__(
            f"partition {partition}: ownership lost, epoch {their_epoch}{who} "
            f"supersedes our epoch {our_epoch}"
        )
        self.partition = partition
        self.our_epoch = our_epoch
        self.their_epoch = their_epoch
        self.owner = owner
