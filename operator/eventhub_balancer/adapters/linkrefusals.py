"""What Event Hubs means when it will not give a receiver a partition, read from the SDK's
errors: a receiver with a higher owner level holds it (``amqp:link:stolen``), the hub or
the consumer group does not exist (``amqp:not-found``), the hub is disabled
(``com.microsoft:entity-disabled``), the start position is past the partition's last
event (``com.microsoft:argument-error``), or the hub has no partition of that id (an argument
condition whose words name the partition: `partition_missing`).

Event Hubs refuses a receive link by attaching it with no source and detaching it at once
with the error; it closes an open one the same way when a newer owner takes the partition. The
SDK hands the error on from its own AMQP layer, or wraps it (a ``ConnectionLostError`` around
an ``AMQPLinkError``), so each reader here walks the chain of causes. A stolen link is news
about ownership (`errors.OwnershipLost`); a missing entity is a configuration error that
reopening cannot mend (`missing`): the receiver and the operator's consumer-group check say
it in one line instead of retrying it as a lost connection, and so does the receiver of a
disabled hub, which waits on its owner as well. Neither can reopening mend a
refused position (`position_refused`): the same position is refused again (`unmendable`).
A throttled namespace (``com.microsoft:server-busy``) is mended by waiting, as long as Event
Hubs asks (`throttled`), never sooner.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from eventhub_balancer import errors

#: The condition Event Hubs puts on a link that a receiver with a higher owner level took over.
LINK_STOLEN = "link:stolen"
#: The condition of a refusal for an entity (hub, consumer group) that does not exist.
NOT_FOUND = "amqp:not-found"
#: How the SDK's own errors (`EventHubError.error`) name it: the condition after "amqp:".
_SDK_NOT_FOUND = NOT_FOUND.partition(":")[2]
#: How Event Hubs refuses a receive link whose sequence number or offset is past the
#: partition's last event: ``The supplied sequence number '12' is invalid. The last sequence
#: number in the system is '4'`` (clients have quoted the condition with offsets, and its
#: words with both). The SDK's other argument condition, never retried by it either, is read
#: the same way.
POSITION_REFUSALS = ("com.microsoft:argument-error", "com.microsoft:argument-out-of-range")
#: How Event Hubs' words tell, under one of those conditions, a partition id the hub does not
#: have (a hub deleted and created again with fewer partitions): ``The specified partition is
#: invalid for an EventHub partition sender or receiver. It should be between 0 and 1.``, then
#: ``Parameter name: PartitionId`` on a second line. Reopening cannot mend it, nor can a
#: checkpoint reset; the operator keeps a partition it assigned although the hub no longer
#: lists it (it never revokes on a listing), so the partition fails until the hub has it.
_NO_SUCH_PARTITION = re.compile(r"\bpartition is invalid\b|parameter name: partitionid", re.I)
#: How Event Hubs refuses a receive link on a hub whose status is Disabled: Azure's .NET
#: client has read it since late 2023 as a lasting fault that needs someone to act, no longer
#: as a passing one it retried. Reopening cannot mend it either.
ENTITY_DISABLED = "com.microsoft:entity-disabled"
#: How Event Hubs refuses, or detaches, a link while it throttles the namespace (over its
#: throughput units, or a busy entity): ``... Please wait 4 seconds and try again.``
SERVER_BUSY = "com.microsoft:server-busy"
#: How long a throttled client waits when Event Hubs' words do not say (what it asks).
THROTTLED_WAIT_S = 4.0
#: The longest wait taken from Event Hubs' words: a pause stays bounded whatever they say.
THROTTLED_WAIT_MAX_S = 60.0
_ASKED_WAIT = re.compile(r"please wait (\d+(?:\.\d+)?) seconds?", re.IGNORECASE)
#: Where Event Hubs' words end and its pointer to its error codes begins.
_KNOW_MORE = " To know more visit"
#: Where Event Hubs' words end and its tracking ids begin.
_TRACKING = " TrackingId:"
#: The SDK wraps an error in at most a couple of levels.
_DEPTH = 5


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = error
    for _ in range(_DEPTH):
        if seen is None:
            return
        yield seen
        details = getattr(seen, "details", None)
        seen = details if isinstance(details, BaseException) else seen.__cause__


def _text(value: object) -> str:
    value = getattr(value, "value", value)  # the SDK's ErrorCondition enum
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def is_link_stolen(error: BaseException) -> bool:
    """Whether an SDK error means a receiver with a higher owner level took the partition."""
    for seen in _chain(error):
        if getattr(seen, "error", None) == LINK_STOLEN:
            return True
        if _text(getattr(seen, "condition", None)).endswith(LINK_STOLEN):
            return True
        if LINK_STOLEN in str(seen):
            return True
    return False


def not_found(error: BaseException) -> str | None:
    """What Event Hubs said with ``amqp:not-found`` (its description), or None when
    ``error`` is not such a refusal. The AMQP error itself is read first; the text of a
    wrapper that lost it, second."""
    chain = list(_chain(error))
    for seen in chain:
        if _text(getattr(seen, "condition", None)) == NOT_FOUND:
            return _first_sentence(_text(getattr(seen, "description", None)) or str(seen))
        if getattr(seen, "error", None) == _SDK_NOT_FOUND:  # the SDK's EventHubError
            return _first_sentence(str(getattr(seen, "message", None) or seen))
    for seen in chain:
        if NOT_FOUND in str(seen):
            return _first_sentence(str(seen))
    return None


#: Where the SDK's text of an AMQP error puts the service's own words.
_DESCRIPTION = "Error Description:"
#: Where the SDK's text of a refused management request (``get_partition_properties`` of a
#: hub that does not exist: status 404) quotes the service's own words, after its own.
_MANAGEMENT_WORDS = re.compile(r"Status code: 404, Description: (['\"])(.*?)\1", re.DOTALL)


def _first_sentence(text: str) -> str:
    """Event Hubs' answer without its tracking ids and links: its first line, up to the
    first full stop that ends a sentence."""
    if _DESCRIPTION in text:
        text = text.split(_DESCRIPTION, 1)[1]
    quoted = _MANAGEMENT_WORDS.search(text)
    if quoted is not None:
        text = quoted.group(2)
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    end = line.find(". ")
    return (line[: end + 1] if end >= 0 else line)[:300]


def names_group(description: str, consumer_group: str) -> bool:
    """Whether a not-found answer names the consumer group rather than the hub: Event Hubs
    names a group's entity ``<namespace>:eventhub:<hub>~<n>|<group>``, and a path to one
    ends in ``/consumergroups/<group>``."""
    group = re.escape(consumer_group.lower())
    return (
        re.search(rf"\|{group}'|/consumergroups/{group}(?![^'/\s])", description.lower())
        is not None
    )


def missing(
    description: str, *, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str
) -> errors.EventHubNotFound:
    """The error a not-found answer means, saying what to create or fix."""
    hub = f"Event Hub {eventhub_name!r} in {fully_qualified_namespace}"
    if names_group(description, consumer_group):
        return errors.ConsumerGroupNotFound(
            f"consumer group {consumer_group!r} of {hub} does not exist: create it, or fix "
            "spec.eventHub.consumerGroup"
        )
    # What to fix before the service's words: a pod's report keeps an error's first 200
    # characters (`partitionreports.MAX_ERROR_CHARS`), and the words come to about 100.
    return errors.EventHubNotFound(
        f"{hub}, or its consumer group {consumer_group!r}, does not exist: fix "
        f"spec.eventHub.name or spec.eventHub.consumerGroup (Event Hubs: {description})"
    )


def position_refused(error: BaseException) -> str | None:
    """What Event Hubs said when it refused the receive link's start position (its words,
    without its tracking ids), or None when ``error`` is not such a refusal."""
    chain = list(_chain(error))
    for seen in chain:
        if _text(getattr(seen, "condition", None)) in POSITION_REFUSALS:
            return _service_words(_text(getattr(seen, "description", None)) or str(seen))
    for seen in chain:
        if any(condition in str(seen) for condition in POSITION_REFUSALS):
            return _service_words(str(seen))
    return None


def partition_missing(error: BaseException) -> str | None:
    """What Event Hubs said when it refused a link because the hub has no partition of that
    id (its words, without its tracking ids), or None when ``error`` is not such a refusal."""
    chain = list(_chain(error))
    for seen in chain:
        if _text(getattr(seen, "condition", None)) in POSITION_REFUSALS:
            text = _text(getattr(seen, "description", None)) or str(seen)
            return _service_words(text) if _NO_SUCH_PARTITION.search(text) else None
    for seen in chain:
        text = str(seen)
        if any(c in text for c in POSITION_REFUSALS) and _NO_SUCH_PARTITION.search(text):
            return _service_words(text)
    return None


def _service_words(text: str) -> str:
    if _DESCRIPTION in text:
        text = text.split(_DESCRIPTION, 1)[1]
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line.split(_TRACKING, 1)[0].strip()[:300]


def throttled(error: BaseException) -> float | None:
    """How many seconds Event Hubs asked to wait when ``error`` is its ``server-busy``
    (`THROTTLED_WAIT_S` when its words do not say, at most `THROTTLED_WAIT_MAX_S`), or None
    when ``error`` is not throttling."""
    words = busy_words(error)
    if words is None:
        return None
    asked = _ASKED_WAIT.search(words)
    wait = float(asked.group(1)) if asked else THROTTLED_WAIT_S
    return min(wait, THROTTLED_WAIT_MAX_S)


#: A throttled link is reopened no sooner than Event Hubs asks (`throttled`), plus up to
#: this share of it at random, so that the partitions it detached together do not all come
#: back in the same instant.
THROTTLED_JITTER = 0.25


def reopen_pause(backoff: float, error: BaseException) -> float:
    """The pause before a link that failed with ``error`` is reopened: the backoff, or at
    least what a throttling Event Hubs asked for (with `THROTTLED_JITTER`)."""
    asked = throttled(error)
    if asked is None:
        return backoff
    return max(backoff, asked) * (1.0 + random.uniform(0.0, THROTTLED_JITTER))


def busy_words(error: BaseException) -> str | None:
    """What Event Hubs said with ``server-busy`` (its words, without its tracking ids or
    its pointer to its error codes), or None when ``error`` is not throttling."""
    return _words(error, SERVER_BUSY)


def disabled(
    error: BaseException, *, fully_qualified_namespace: str, eventhub_name: str
) -> errors.EventHubNotFound | None:
    """The error a refusal for a hub its owner disabled means (``entity-disabled``, in Event
    Hubs' words and saying what to do), or None when ``error`` is not such a refusal."""
    words = _words(error, ENTITY_DISABLED)
    if words is None:
        return None
    return errors.EventHubNotFound(
        f"Event Hub {eventhub_name!r} in {fully_qualified_namespace} is disabled (Event "
        f"Hubs: {words}): set its status to Active, or fix spec.eventHub.name"
    )


def _words(error: BaseException, condition: str) -> str | None:
    """What Event Hubs said with ``condition`` (its words, without its tracking ids or its
    pointer to its error codes), or None when ``error`` is not that refusal."""
    chain = list(_chain(error))
    found = next((e for e in chain if _text(getattr(e, "condition", None)) == condition), None)
    if found is None:
        found = next((e for e in chain if condition in str(e)), None)
        if found is None:
            return None
    text = _text(getattr(found, "description", None)) or str(found)
    return _service_words(text).split(_KNOW_MORE, 1)[0].strip()


def unmendable(
    error: BaseException,
    *,
    partition: str,
    fully_qualified_namespace: str,
    eventhub_name: str,
    consumer_group: str,
    after_events: bool = False,
) -> errors.EventHubBalancerError | None:
    """The error a receive link's refusal means when reopening it cannot mend it: a hub or
    consumer group that does not exist (`missing`), a hub that is disabled, a partition id
    the hub does not have (`partition_missing`, even after events), or a position past the
    partition's end;
    None for every other failure (a lost connection, a stolen link). A position refused
    ``after_events`` the link received is the SDK's own reconnect (by the last event's
    offset) onto a stream that may have been replaced: a reopen after the last event, whose
    check says whether it was (``receiving``), mends it or says why not."""
    described = not_found(error)
    if described is not None:
        return missing(
            described,
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=eventhub_name,
            consumer_group=consumer_group,
        )
    off = disabled(
        error, fully_qualified_namespace=fully_qualified_namespace, eventhub_name=eventhub_name
    )
    if off is not None:
        return off
    lacking = partition_missing(error)
    if lacking is not None:
        # Tried again with backoff: the hub may get the partition back. The pod's report
        # keeps 200 characters: what it means first, Event Hubs' words last.
        return errors.EventHubUnreachable(
            f"partition {partition} does not exist on Event Hub {eventhub_name!r} (created "
            f"again with fewer partitions?); a checkpoint reset cannot mend it (Event Hubs: "
            f"{lacking})"
        )
    refused = None if after_events else position_refused(error)
    if refused is not None:
        # Transient: the worker's restart moves a checkpoint past the end back, and a start
        # position past the end waits until the partition has its event.
        return errors.EventHubUnreachable(
            f"partition {partition}: Event Hubs refused the receive position: {refused}"
        )
    return None
