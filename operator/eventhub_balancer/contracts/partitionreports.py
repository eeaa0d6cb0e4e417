"""What a pod reports about partitions it cannot process normally, and how the operator reads it.

A failure stays with the partition that failed: a poison batch, an unreadable checkpoint or
a hung handler does not make the pod NotReady and does not move the partition (that only
spreads the fault). The pod says which of its partitions are in trouble in one annotation on
its own ConfigMap, beside its acknowledgements; the operator shows them in the CR's status
(condition ``PartitionsFailing``), posts Events and exports a metric.

The annotation is written by the pod, so the operator treats it as untrusted input: its size
is bounded, unknown keys and malformed entries are dropped, an error text is cut to its first
line and `MAX_ERROR_CHARS` (between words, marked), and a report counts only for the epoch the
operator assigned to that pod (`current`).

The states:

- ``failing``: the handler keeps failing on a batch; the pod retries with backoff
  (``spec.processing.maxAttempts``), then dead-letters or parks it by policy;
- ``parked``: the pod stopped the partition at its checkpoint (``onFailure: park``); nothing
  moves until the batch is dead-lettered, replayed, or the partition is reassigned by hand;
- ``stuck``: a handler call has run longer than ``--stuck-seconds``;
- ``lost``: the partition was taken at the pod's own epoch (Event Hubs or the checkpoint blob
  holds a higher epoch than the one the operator assigned): the operator reassigns it at
  epoch + 1 in its next cycle.

Besides its troubles, a pod tells the batches it set aside into the dead letters
(``onFailure: deadLetter``) at each epoch it holds (`SetAside`): how many, and the last one's
name and error. They go under the annotation's `SET_ASIDE_KEY`, which is no partition id, so
an operator from before it drops them as it drops every key it does not know, and a pod from
before it writes no such key (`set_asides` is None: the pod does not say). A report whose
``state`` is None carries only that: the partition processes normally.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Literal, get_args

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import bounds, conditions, configmaps

#: The pod's annotation on its own ConfigMap: ``{partition: {epoch, state, attempts, error,
#: restarting}}``.
ANNOTATION = configmaps.ANNOTATION_PARTITION_REPORTS

ReportState = Literal["failing", "parked", "stuck", "lost"]
REPORT_STATES: tuple[ReportState, ...] = get_args(ReportState)
#: The annotation's key for the batches set aside, {partition: {epoch, batches, name, error}}.
SET_ASIDE_KEY = "deadLettered"
#: A dead letter's name longer than this is not told (the blob store's limit is 1,024
#: characters; the names the pods write are under 200).
MAX_NAME_CHARS = 512
#: How `build`'s text begins the set-asides when there is one (`sets_aside`).
_SETS_ASIDE = f'"{SET_ASIDE_KEY}":{{"'

#: An error's first line is enough to tell what broke; the pod's log has the rest. Bounded so
#: that a pod cannot grow the operator's status or Events without limit.
MAX_ERROR_CHARS = 200
#: The most reports read from one annotation: Event Hubs allows at most 1,024 partitions per
#: hub, so a pod never legitimately reports more.
MAX_REPORTS = 1024
#: The most bytes of annotation value read (and written: `build` drops the error texts when
#: the reports would not fit).
MAX_ANNOTATION_BYTES = bounds.MAX_ANNOTATION_BYTES


@dataclasses.dataclass(frozen=True, kw_only=True)
class PartitionReport:
    """One partition's trouble, as its owner reports it."""

    partition: str
    epoch: int
    #: None: no trouble; the report tells only what was set aside (`set_aside`)
    state: ReportState | None
    #: how many times the failing batch was tried (0 when not applicable)
    attempts: int = 0
    #: failing, and no batch is: the partition's worker fails to start or to receive (its
    #: fence, its link, its clients) and starts again; ``attempts`` counts its starts
    restarting: bool = False
    #: the first line of the error, cut to `MAX_ERROR_CHARS` between words
    error: str = ""
    #: the batches set aside into the dead letters at this epoch (None: none)
    set_aside: SetAside | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SetAside:
    """The batches a pod set aside into the dead letters at one epoch of a partition."""

    epoch: int
    #: how many, since the pod's process started
    batches: int
    #: the last one's dead letter (``ehb deadletters show NAME``) and error
    name: str = ""
    error: str = ""

    @classmethod
    def counted(cls, before: SetAside | None, *, epoch: int, name: str, error: str) -> SetAside:
        """One more batch set aside at ``epoch`` (as ``name``, for ``error``), after ``before``:
        the count starts again at another epoch."""
        batches = before.batches + 1 if before is not None and before.epoch == epoch else 1
        return cls(epoch=epoch, batches=batches, name=name, error=first_line(error))


#: The header of a Python traceback, which some errors carry in their message (Spark's
#: ``PythonException`` does: the worker's traceback, under one line that names no cause).
TRACEBACK = "Traceback (most recent call last):"
#: The first line of a Java exception as py4j words it (``Py4JJavaError``, which PySpark
#: raises where it has no exception of its own, a write that fails say): it names only the
#: JVM object called (``o254``, a new one at every call) and the method. The Java exception
#: and its stack follow, its root cause on the last ``Caused by:`` line.
PY4J_CALL = re.compile(r"An error occurred while calling (?:o\d+|z:[\w.$]+)\.(\w+)\.?$")
JAVA_CAUSE = "Caused by: "
#: The first line of a gRPC call's failure as grpcio words it (which Spark Connect's client
#: passes on as ``SparkConnectGrpcException``): it names no cause. The status code and the
#: details (the server's words, or the channel's: ``Connection refused``) follow, a line each.
GRPC_CALL = re.compile(
    r"<_(?:InactiveRpcError|MultiThreadedRendezvous) of RPC that terminated with:$"
)
GRPC_STATUS = re.compile(r"^\s*status = StatusCode\.(\w+)$", re.MULTILINE)
GRPC_DETAILS = re.compile(r'^\s*details = "(.*)"$', re.MULTILINE)
#: The first line of an AMQP error as the Event Hubs SDK words it: the condition alone
#: (``Error condition: ErrorCondition.SocketError``); what happened follows on the next line.
AMQP_CONDITION = re.compile(r"Error condition: (?:ErrorCondition\.)?([\w:.-]+)$")
AMQP_DESCRIPTION = re.compile(r"^\s*Error Description: (.+)$", re.MULTILINE)


#: What an error names that changes at each attempt or partition and tells nothing of the
#: cause: UUIDs (a Spark write's staging directory) and runs of 10 digits or more (its attempt
#: ids, stamped to the millisecond).
GENERATED_ID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b|\d{10,}"
)


def without_ids(error: str) -> str:
    """``error`` with its generated ids as ``*`` (`GENERATED_ID`): the words every partition
    failing on one cause shares, where each names its own staging directory."""
    return GENERATED_ID.sub("*", error)


def first_line(error: str) -> str:
    """An error message as a report carries it: its first line, as printable text
    (`bounds.printable`), bounded. When the message
    carries a Python traceback, its cause (the traceback's exception line) is what the line
    says after the first, or instead of a first line that is the traceback's header. A
    py4j Java exception says the method called and the Java exception's root cause, instead
    of the JVM object called (`PY4J_CALL`); a gRPC call's failure says its details and status
    code, instead of the words that announce them (`GRPC_CALL`); an AMQP error its condition
    and description (`AMQP_CONDITION`), where the refused address or the service's words are."""
    lines = error.strip().splitlines()
    line = lines[0].strip() if lines else ""
    if call := PY4J_CALL.search(line):
        java = [t[2:] for t in lines[1:] if t.startswith(": ")][:1]
        causes = [t[len(JAVA_CAUSE) :] for t in lines[1:] if t.startswith(JAVA_CAUSE)]
        if root := (causes[-1:] or java):
            line = f"{line[: call.start()]}calling {call[1]}: {root[0].strip()}"
    if (call := GRPC_CALL.search(line)) and (details := GRPC_DETAILS.search(error)):
        code = GRPC_STATUS.search(error)
        line = f"{line[: call.start()]}{details[1]}" + (f" ({code[1]})" if code else "")
    if (amqp := AMQP_CONDITION.search(line)) and (said := AMQP_DESCRIPTION.search(error)):
        line = f"{line[: amqp.start()]}{amqp[1]}: {said[1].strip()}"
    if TRACEBACK in error:
        tail = error.rsplit(TRACEBACK, 1)[1].splitlines()
        cause = next((t.strip() for t in tail if t.strip() and not t[0].isspace()), "")
        if line == TRACEBACK or not line:
            line = cause or line
        elif cause and cause not in line:
            line = f"{line.rstrip(': ')}: {cause}"
    return conditions.shorten(bounds.printable(line), MAX_ERROR_CHARS)


def build(reports: Mapping[str, PartitionReport]) -> str:
    """The annotation value: compact JSON, sorted, bounded (errors and the dead letters' names
    are dropped to fit). The set-asides go under `SET_ASIDE_KEY`, always present (empty when
    none), so that the operator knows the pod tells them."""
    chosen = sorted(reports.items(), key=lambda item: models.name_key(item[0]))[:MAX_REPORTS]

    def encode(with_errors: bool) -> str:
        body: dict[str, object] = {
            p: {
                "epoch": r.epoch,
                "state": r.state,
                "attempts": r.attempts,
                "error": first_line(r.error) if with_errors else "",
                # Only when true: an operator from before it passes over a key it does not know.
                **({"restarting": True} if r.restarting else {}),
            }
            for p, r in chosen
            if r.state is not None
        }
        body[SET_ASIDE_KEY] = {
            p: {
                "epoch": a.epoch,
                "batches": a.batches,
                "name": a.name if with_errors else "",
                "error": first_line(a.error) if with_errors else "",
            }
            for p, r in chosen
            if (a := r.set_aside) is not None
        }
        return json.dumps(body, separators=(",", ":"))

    value = encode(with_errors=True)
    return value if len(value) <= MAX_ANNOTATION_BYTES else encode(with_errors=False)


def parse(
    annotations: Mapping[str, str] | None, *, current: Mapping[str, int]
) -> dict[str, PartitionReport]:
    """The reports that count: well-formed, about a partition the pod owns at that epoch.

    ``current`` is what the operator assigned to this pod: {partition: epoch}. Anything else
    in the annotation (other partitions, other epochs, unknown states or keys, oversized
    values) is ignored: a pod can only speak for what it was given.
    """
    body = _body(annotations)
    reports: dict[str, PartitionReport] = {}
    for partition, item in list(body.items())[:MAX_REPORTS]:
        report = _entry(partition, item)
        if report is not None and current.get(partition) == report.epoch:
            reports[partition] = report
    return reports


def set_asides(
    annotations: Mapping[str, str] | None, *, current: Mapping[str, int]
) -> dict[str, SetAside] | None:
    """The batches set aside that count, {partition: SetAside}: well-formed, about a partition
    the pod owns at that epoch (``current``, as `parse`); None when the pod does not say (a
    pod from before `SET_ASIDE_KEY`, or no report read)."""
    told = _body(annotations).get(SET_ASIDE_KEY)
    if not isinstance(told, dict):
        return None
    found: dict[str, SetAside] = {}
    for partition, item in list(told.items())[:MAX_REPORTS]:
        if not (bounds.is_partition_id(partition) and isinstance(item, dict)):
            continue
        epoch, batches = item.get("epoch"), item.get("batches")
        name, error = item.get("name", ""), item.get("error", "")
        if (
            not (isinstance(epoch, int) and bounds.is_epoch(epoch))
            or current.get(partition) != epoch
        ):
            continue
        if not (isinstance(batches, int) and bounds.is_epoch(batches) and batches > 0):
            continue
        name = bounds.printable(name) if isinstance(name, str) else ""
        found[partition] = SetAside(
            epoch=epoch,
            batches=batches,
            name=name if len(name) <= MAX_NAME_CHARS else "",
            error=first_line(error) if isinstance(error, str) else "",
        )
    return found


def sets_aside(annotations: Mapping[str, str] | None) -> bool:
    """The pod's reports tell a batch set aside: a check on the text as `build` writes it,
    for a decision to read them (`set_asides`) only then."""
    return _SETS_ASIDE in (annotations or {}).get(ANNOTATION, "")


def _body(annotations: Mapping[str, str] | None) -> dict[str, object]:
    """The annotation's JSON object; empty when there is none, or it is oversized or malformed."""
    raw = (annotations or {}).get(ANNOTATION)
    if not raw or not isinstance(raw, str) or len(raw) > MAX_ANNOTATION_BYTES:
        return {}
    try:
        body = bounds.loads(raw)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _entry(partition: object, item: object) -> PartitionReport | None:
    if not isinstance(partition, str) or not bounds.is_partition_id(partition):
        return None
    if not isinstance(item, dict):
        return None
    epoch, state = item.get("epoch"), item.get("state")
    attempts, error = item.get("attempts", 0), item.get("error", "")
    if not bounds.is_epoch(epoch) or not isinstance(epoch, int):
        return None
    if state not in REPORT_STATES:
        return None
    if not bounds.is_epoch(attempts):  # the status field is an int64, as epochs are
        attempts = 0
    if not isinstance(error, str):
        error = ""
    return PartitionReport(
        partition=partition,
        epoch=epoch,
        state=state,
        attempts=attempts,
        error=first_line(error),
        restarting=state == "failing" and item.get("restarting") is True,
    )
