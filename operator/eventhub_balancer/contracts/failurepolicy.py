"""The failure policy (``spec.processing``): what a pod does with a batch its handler keeps
failing on.

The CR carries it and the pod's ConfigMap carries it on (``configmaps.KEY_PROCESSING``), in the
same shape, so both are read here: ``maxAttempts`` tries with exponential backoff between them,
then ``park`` (stop the partition at its checkpoint, before the batch) or ``deadLetter`` (write
the batch and its error beside the checkpoints, then checkpoint past it). Either way only that
partition is affected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal, TypedDict, cast, get_args

from eventhub_balancer import errors


class ProcessingBody(TypedDict, total=False):
    maxAttempts: int
    onFailure: str


OnFailure = Literal["park", "deadLetter"]
ON_FAILURE: tuple[OnFailure, ...] = get_args(OnFailure)
DEFAULT_MAX_ATTEMPTS = 10
MAX_MAX_ATTEMPTS = 1000


@dataclasses.dataclass(frozen=True, kw_only=True)
class Processing:
    """``spec.processing``, validated, with its defaults filled in."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    on_failure: OnFailure = "park"

    def describe(self) -> dict[str, Any]:
        """The CR's shape, as the pod's ConfigMap carries it."""
        return {"maxAttempts": self.max_attempts, "onFailure": self.on_failure}


def parse(
    value: Any, *, field: str = "spec.processing", unknown_fields: bool = False
) -> Processing:
    """``spec.processing`` (or the same shape from a pod's ConfigMap), defaults filled in.

    ``unknown_fields``: a field it does not know is passed over, not refused. A pod reads its
    ConfigMap so, since an operator newer than the pod may write a field the pod has yet to
    learn; refusing the whole policy would put the default (park) in place of the user's."""
    if value is None:
        return Processing()
    if not isinstance(value, Mapping):
        raise errors.InvalidInput(field, "must be an object")
    unknown = sorted(set(value) - {"maxAttempts", "onFailure"})
    if unknown and not unknown_fields:
        raise errors.InvalidInput(
            f"{field}.{unknown[0]}", "is not a field of processing: use maxAttempts or onFailure"
        )
    attempts = value.get("maxAttempts", DEFAULT_MAX_ATTEMPTS)
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise errors.InvalidInput(f"{field}.maxAttempts", "must be an integer")
    if not 1 <= attempts <= MAX_MAX_ATTEMPTS:
        raise errors.InvalidInput(
            f"{field}.maxAttempts",
            f"{attempts} is out of range: use between 1 and {MAX_MAX_ATTEMPTS}",
        )
    on_failure = value.get("onFailure", "park")
    if on_failure not in ON_FAILURE:
        raise errors.InvalidInput(f"{field}.onFailure", f"{on_failure!r}: use park or deadLetter")
    return Processing(max_attempts=attempts, on_failure=cast(OnFailure, on_failure))


def sequence_numbers(first: int, last: int) -> str:
    """A failing or dead-lettered batch's sequence numbers as the pod's log and ``ehb
    deadletters list`` say them: ``110`` for a batch of one, ``110-111`` for more."""
    return str(first) if first == last else f"{first}-{last}"


def short_name(name: str) -> str:
    """A dead letter's name as ``ehb deadletters list`` prints it, ``3/110-114``: its partition
    and sequence numbers, after the consumer's folder (`adapters.deadletters.blob_name`)."""
    return "/".join(name.removesuffix(".json").split("/")[-2:])


def numbered(first: int, last: int) -> str:
    """``sequence number 110`` for a batch of one, ``sequence numbers 110-111`` for more."""
    plural = "" if first == last else "s"
    return f"sequence number{plural} {sequence_numbers(first, last)}"
