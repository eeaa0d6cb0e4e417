"""The pod's partition reports: what it writes, and what the operator accepts of it."""

from __future__ import annotations

import json
import socket

import grpc
import pytest
from azure.eventhub._pyamqp import error as amqp_error

from eventhub_balancer.adapters import deadletters
from eventhub_balancer.contracts import checkpointblobs, failurepolicy
from eventhub_balancer.contracts import partitionreports as reports


def report(partition: str = "3", **changes: object) -> reports.PartitionReport:
    fields: dict[str, object] = {
        "partition": partition,
        "epoch": 4,
        "state": "failing",
        "attempts": 5,
        "error": "ValueError: bad event",
    }
    fields.update(changes)
    return reports.PartitionReport(**fields)  # type: ignore[arg-type]


def annotations(body: object) -> dict[str, str]:
    return {reports.ANNOTATION: json.dumps(body)}


def test_a_report_round_trips_for_the_epoch_the_pod_owns() -> None:
    value = reports.build({"3": report()})
    parsed = reports.parse({reports.ANNOTATION: value}, current={"3": 4})
    assert parsed == {"3": report()}


def test_a_partition_restarting_says_so_and_only_when_it_is_and_failing() -> None:
    restarting = report(restarting=True, error="EventHubUnreachable: refused")
    value = reports.build({"3": restarting, "4": report("4")})
    assert json.loads(value)["3"]["restarting"] is True
    assert "restarting" not in json.loads(value)["4"]  # an older operator reads the same
    parsed = reports.parse({reports.ANNOTATION: value}, current={"3": 4, "4": 4})
    assert parsed == {"3": restarting, "4": report("4")}
    # Only a failing partition restarts, and only true says so: a pod's word, not trusted.
    told = {
        "3": {"epoch": 4, "state": "stuck", "restarting": True},
        "4": {"epoch": 4, "state": "failing", "restarting": "yes"},
    }
    parsed = reports.parse(annotations(told), current={"3": 4, "4": 4})
    assert not parsed["3"].restarting
    assert not parsed["4"].restarting


def test_only_the_first_line_of_an_error_is_kept_and_it_is_bounded() -> None:
    long = "Traceback (most recent call last):\n  File x\nValueError"
    assert reports.first_line(long) == "ValueError"
    assert len(reports.first_line("x" * 10_000)) == reports.MAX_ERROR_CHARS
    value = reports.build({"3": report(error="y" * 10_000 + "\nmore")})
    parsed = reports.parse({reports.ANNOTATION: value}, current={"3": 4})
    assert parsed["3"].error == "y" * (reports.MAX_ERROR_CHARS - 2) + " …"


def test_an_error_is_cut_between_words_where_it_can_be() -> None:
    """The first 200 characters were kept as they fell: "... fix spec.ev"."""
    words = "Event Hub 'orders' does not exist: fix spec.eventHub.name " * 5
    cut = reports.first_line(words)
    assert len(cut) <= reports.MAX_ERROR_CHARS
    kept = cut.removesuffix(" …")
    assert cut == kept + " …"
    assert words.startswith(kept)
    assert words[len(kept)] == " "  # a whole word last
    # A word longer than 30 characters (a URL) is cut inside: the line keeps what fits of it.
    url = "failed: https://" + "a" * 300
    assert reports.first_line(url) == url[: reports.MAX_ERROR_CHARS - 2] + " …"


def test_a_pod_speaks_only_for_what_it_was_given() -> None:
    body = {
        "3": {"epoch": 4, "state": "parked"},
        "5": {"epoch": 2, "state": "failing"},  # another pod's partition
        "7": {"epoch": 9, "state": "lost"},  # an epoch it was never given
    }
    parsed = reports.parse(annotations(body), current={"3": 4, "7": 8})
    assert list(parsed) == ["3"]
    assert parsed["3"].state == "parked"


def test_malformed_input_is_ignored_not_fatal() -> None:
    current = {"3": 4}
    assert reports.parse(None, current=current) == {}
    assert reports.parse({reports.ANNOTATION: "{not json"}, current=current) == {}
    assert reports.parse(annotations(["3"]), current=current) == {}
    assert reports.parse(annotations({"3": "failing"}), current=current) == {}
    assert (
        reports.parse(annotations({"3": {"epoch": "4", "state": "failing"}}), current=current) == {}
    )
    assert (
        reports.parse(annotations({"3": {"epoch": 4, "state": "on-fire"}}), current=current) == {}
    )
    assert (
        reports.parse(annotations({"3": {"epoch": True, "state": "lost"}}), current=current) == {}
    )
    odd = reports.parse(
        annotations({"3": {"epoch": 4, "state": "stuck", "attempts": -1, "error": 7, "x": 1}}),
        current=current,
    )
    assert odd["3"] == reports.PartitionReport(partition="3", epoch=4, state="stuck")


def test_an_oversized_annotation_is_ignored_whole() -> None:
    padded = {"3": {"epoch": 4, "state": "failing", "error": "x" * reports.MAX_ANNOTATION_BYTES}}
    assert reports.parse(annotations(padded), current={"3": 4}) == {}


def test_an_error_that_carries_a_traceback_names_its_cause() -> None:
    # Spark's PythonException, as a failing UDF raises it: the first line names no cause.
    error = (
        "PythonException: An exception was thrown from the Python worker:\n"
        "Traceback (most recent call last):\n"
        '  File "worker.py", line 4207, in invoke_udf\n'
        "    func = read_udfs(\n"
        "           ^^^^^^^^^^\n"
        "ValueError: poison 1/5\n"
        "  more text of the message\n"
    )
    assert reports.first_line(error) == (
        "PythonException: An exception was thrown from the Python worker: ValueError: poison 1/5"
    )
    # A message that already names its cause first is kept as it is.
    assert (
        reports.first_line(
            "ValueError: bad\nTraceback (most recent call last):\n  File x\nValueError: bad"
        )
        == "ValueError: bad"
    )


def test_a_java_exception_names_the_method_and_its_root_cause() -> None:
    # py4j's text of a Parquet write that failed in the JVM: the first line names only the
    # object called (o254, another at every attempt), the cause comes after the stack.
    error = (
        "Py4JJavaError: An error occurred while calling o254.parquet.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage "
        "0.0 failed 1 times, most recent failure: Lost task 0.0\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages\n"
        "Caused by: org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors\n"
        "\tSuppressed: java.lang.IllegalStateException: not the cause\n"
        "\t\tCaused by: java.lang.Error: nor this\n"
        "Caused by: java.io.IOException: Mkdirs failed to create file:/data/out\n"
        "\t... 22 more\n"
    )
    assert reports.first_line(error) == (
        "Py4JJavaError: calling parquet: java.io.IOException: Mkdirs failed to create "
        "file:/data/out"
    )
    # No cause: the Java exception's own line; a static method is named as well.
    assert reports.first_line(
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe."
        "\n: java.lang.OutOfMemoryError: Java heap space\n\tat x.y(Z.java:1)"
    ) == ("calling collectAndServe: java.lang.OutOfMemoryError: Java heap space")
    # Without the Java text (the JVM gone before it was asked), the line stays as it was.
    alone = "Py4JJavaError: An error occurred while calling o7.count."
    assert reports.first_line(alone) == alone


def test_a_grpc_failure_says_its_details_and_status() -> None:
    """A Spark Connect server gone under a trigger: the report said
    "SparkConnectGrpcException: <_InactiveRpcError of RPC that terminated with:", grpcio's
    first line, which names no cause. The text here is grpcio's own, of a call to a closed
    port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/spark.connect.SparkConnectService/Config")
        with pytest.raises(grpc.RpcError) as raised:
            call(b"", timeout=10)
    error = f"SparkConnectGrpcException: {raised.value}"
    assert error.splitlines()[0].endswith("of RPC that terminated with:")
    said = reports.first_line(error)
    assert said.startswith("SparkConnectGrpcException: failed to connect to all addresses")
    assert said.endswith("Connection refused (UNAVAILABLE)")
    # Without the details, the line stays as it was.
    alone = "SparkConnectGrpcException: <_InactiveRpcError of RPC that terminated with:"
    assert reports.first_line(alone) == alone


def test_an_amqp_error_says_its_condition_and_what_happened() -> None:
    """A Secret pointed at a closed port: every partition reported "receiving failed 6 times
    in a row, last: AMQPConnectionError: Error condition: ErrorCondition.SocketError", the
    SDK's first line, and the refused address was on the next. The text is the SDK's own."""
    refused = amqp_error.AMQPConnectionError(
        amqp_error.ErrorCondition.SocketError,
        description="Failed to initiate the connection due to exception: [Errno 111] Connect "
        "call failed ('127.0.0.1', 5679)",
    )
    error = f"partition 5: receiving failed 6 times in a row, last: AMQPConnectionError: {refused}"
    assert reports.first_line(error) == (
        "partition 5: receiving failed 6 times in a row, last: AMQPConnectionError: SocketError: "
        "Failed to initiate the connection due to exception: [Errno 111] Connect call failed "
        "('127.0.0.1', 5679)"
    )
    # Without the description, the line stays as it was.
    alone = "AMQPConnectionError: Error condition: ErrorCondition.SocketError"
    assert reports.first_line(alone) == alone


#: What a terminal acts on: cursor moves and erasures (ESC [), a write to the clipboard
#: (OSC 52), an 8-bit CSI, a bell, and a right-to-left override that reorders the line.
TERMINAL_CONTROLS = "bad\x1b[1A\x1b[2K\x1b]52;c;cm0gLXJmIH4K\x07\x9b2J\u202edelif"


def test_an_error_carries_no_terminal_control_into_the_status() -> None:
    """A pod's report is shown in the CR's status, its Events, the operator's log and
    ``ehb status``: an escape sequence in it moved the cursor over, erased and rewrote the
    lines an admin read of every tenant's consumers, or set the admin's clipboard. Each
    control character is shown as its escape, within the same bound."""
    raw = annotations({"3": {"epoch": 4, "state": "failing", "error": TERMINAL_CONTROLS}})
    error = reports.parse(raw, current={"3": 4})["3"].error
    assert error == "bad\\x1b[1A\\x1b[2K\\x1b]52;c;cm0gLXJmIH4K\\x07\\x9b2J\\u202edelif"
    assert error.isprintable()
    assert len(reports.first_line("\x1b" * 1000)) == reports.MAX_ERROR_CHARS


ASIDE = reports.SetAside(
    epoch=4, batches=2, name="shop/orders/$Default/deadletter/3/110-114", error="ValueError: no"
)


def test_the_batches_set_aside_go_beside_the_troubles_and_alone_when_there_is_none() -> None:
    """A partition failing on a new batch after one was set aside tells both; one processing
    normally tells only what it set aside, and is no trouble."""
    value = reports.build(
        {"3": report(set_aside=ASIDE), "5": report("5", state=None, attempts=0, set_aside=ASIDE)}
    )
    current = {"3": 4, "5": 4}
    assert list(reports.parse({reports.ANNOTATION: value}, current=current)) == ["3"]
    assert reports.set_asides({reports.ANNOTATION: value}, current=current) == {
        "3": ASIDE,
        "5": ASIDE,
    }
    # Nothing to tell is said (the pod tells them), and a pod from before says nothing.
    assert reports.set_asides({reports.ANNOTATION: reports.build({})}, current=current) == {}
    assert reports.set_asides(annotations({}), current=current) is None
    assert reports.set_asides(None, current=current) is None


def test_a_count_starts_again_at_each_epoch() -> None:
    first = reports.SetAside.counted(None, epoch=4, name="a", error="E: 1\nstack")
    assert (first.batches, first.error) == (1, "E: 1")
    second = reports.SetAside.counted(first, epoch=4, name="b", error="E: 2")
    assert (second.epoch, second.batches, second.name) == (4, 2, "b")
    assert reports.SetAside.counted(second, epoch=5, name="c", error="E").batches == 1


def test_a_pod_tells_only_the_set_asides_of_what_it_was_given_and_well_formed() -> None:
    told = {
        "3": {"epoch": 4, "batches": 2, "name": "n", "error": "E"},
        "5": {"epoch": 3, "batches": 1},  # an epoch it no longer holds
        "7": {"epoch": 4, "batches": 1},  # another pod's partition
        "8": {"epoch": 4, "batches": 0},  # nothing set aside
        "9": {"epoch": 4, "batches": True},
        "10": {"epoch": 4, "batches": 1, "name": "x" * (reports.MAX_NAME_CHARS + 1), "error": 7},
        "11": {"epoch": 4, "batches": 1, "name": "\x1b[2Jgone"},
        "nope": {"epoch": 4, "batches": 1},
        "12": "3",
    }
    current = {p: 4 for p in ("3", "5", "8", "9", "10", "11", "12")}
    found = reports.set_asides(annotations({reports.SET_ASIDE_KEY: told}), current=current)
    assert found == {
        "3": reports.SetAside(epoch=4, batches=2, name="n", error="E"),
        "10": reports.SetAside(epoch=4, batches=1),
        "11": reports.SetAside(epoch=4, batches=1, name="\\x1b[2Jgone"),
    }
    assert reports.set_asides(annotations({reports.SET_ASIDE_KEY: []}), current=current) is None


def test_set_asides_too_many_to_fit_keep_their_counts_without_names() -> None:
    many = {
        str(p): report(str(p), error="e" * 150, set_aside=dataclass_aside(p)) for p in range(1024)
    }
    value = reports.build(many)
    assert len(value) <= reports.MAX_ANNOTATION_BYTES
    found = reports.set_asides({reports.ANNOTATION: value}, current=dict.fromkeys(many, 4))
    assert found is not None
    assert len(found) == 1024
    assert found["7"] == reports.SetAside(epoch=4, batches=7 + 1)


def dataclass_aside(p: int) -> reports.SetAside:
    return reports.SetAside(epoch=4, batches=p + 1, name="d" * 100 + str(p), error="E" * 150)


def test_a_dead_letter_is_told_by_the_name_ehb_deadletters_list_prints() -> None:
    """On the local stack the pods told the blob's whole name, whose ``$default`` a shell
    expands in the command the Event gives: ``show`` takes the short one too."""
    where = {
        "fully_qualified_namespace": "127.0.0.1:5672",
        "eventhub_name": "orders",
        "consumer_group": "$Default",
    }
    name = deadletters.blob_name(
        **where, partition="3", first_sequence_number=110, last_sequence_number=114
    )
    prefix = checkpointblobs.blob_prefix(**where, kind=deadletters.KIND)
    assert failurepolicy.short_name(name) == "3/110-114"
    assert failurepolicy.short_name(name) == name[len(prefix) :].removesuffix(".json")
    assert failurepolicy.short_name("3/110-114") == "3/110-114"
