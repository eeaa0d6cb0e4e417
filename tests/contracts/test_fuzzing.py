"""Fuzzing the parsers of untrusted input: a value or the project's own error, in bounded time.

Each parser below reads what someone other than the operator wrote: a CR's spec (its author),
a connection string (a Secret's author), a pod's ConfigMap data (as the pod reads it, and as the
operator reads it back), a pod's acknowledgement annotations (``applied-generation``,
``released``, ``partition-reports``). Whatever arrives, each returns a value or raises an
`errors.EventHubBalancerError`: any other exception would fail the cycle, or the pod, at
every attempt. What they return is checked too, where a later step relies on it: names the API
server accepts, int64 numbers, times that can be written back, bounded texts.

The inputs are JSON-ish: JSON values with big numbers, deep nesting and control characters,
JSON text of them, broken JSON text, and valid bodies with one field replaced. Runs are
derandomized with no example database, so CI sees the same examples every time; the sizes are
bounded and each example has a deadline.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eventhub_balancer import errors
from eventhub_balancer.balancing import models
from eventhub_balancer.consumer import assignments
from eventhub_balancer.contracts import (
    bounds,
    configmaps,
    connectionstrings,
    endpoints,
    failurepolicy,
    partitionreports,
    podassignments,
    podstates,
    specs,
    startpositions,
    timestamps,
)

FUZZ = settings(
    max_examples=100,
    deadline=datetime.timedelta(milliseconds=500),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- JSON-ish input

#: Characters that parsers stumble on: control characters (a newline after a name), the
#: separators of the formats here, non-ASCII letters that case-fold onto ASCII.
AWKWARD = st.sampled_from(
    ["\n", "\r", "\t", "\x00", " ", ";", "=", "/", ":", "@", ".", "-", "\u0131", "\u212a", "Z"]
)
TEXT = st.one_of(
    st.text(max_size=20),
    st.builds(lambda s, c: s + c, st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), AWKWARD),
    st.sampled_from(["", "0", "7", "-1", "earliest", "latest", "true", "park", "owned"]),
)
#: Numbers around the int64 range and JSON's own awkward ones.
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, bounds.MAX_FLOOR, bounds.MAX_EPOCH, bounds.MAX_EPOCH + 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
#: Times at the edges of what Python's datetime holds, with offsets that push them over.
TIMES = st.builds(
    lambda when, minutes: when.replace(
        tzinfo=datetime.timezone(datetime.timedelta(minutes=minutes))
    ).isoformat(),
    st.sampled_from(
        [
            datetime.datetime.min,
            datetime.datetime.max,
            datetime.datetime(2024, 5, 1, 12),
        ]
    ),
    st.one_of(
        st.sampled_from([-(23 * 60 + 59), -60, 0, 60, 23 * 60 + 59]),
        st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59),
    ),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT, TIMES)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(TEXT, TIMES), inner, max_size=4)
    ),
    max_leaves=12,
)


def nested(depth: int, opener: str) -> str:
    return opener * depth


#: Text that looks like JSON: JSON of JSON-ish values, cut or deeply nested JSON, plain text.
JSON_TEXT = st.one_of(
    JSONISH.map(lambda v: json.dumps(v)),
    st.builds(lambda v, cut: json.dumps(v)[:cut], JSONISH, st.integers(min_value=0, max_value=40)),
    st.builds(
        nested,
        st.integers(min_value=500, max_value=20_000),
        st.sampled_from(["[", '{"0":', '{"0":{"epoch":']),
    ),
    st.builds(lambda n: "9" * n, st.integers(min_value=4000, max_value=5000)),
    TEXT,
)


def replaced(body: Any, path: tuple[str, ...], value: Any) -> Any:
    """``body`` with the value at ``path`` replaced (or added)."""
    body = copy.deepcopy(body)
    target = body
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value
    return body


# -- parse_spec

SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "consumerGroup": "$Default",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "accountUrl": "https://shop.blob.core.windows.net",
        "credentials": {"workloadIdentity": {}},
    },
    "selector": {
        "matchLabels": {"app": "orders"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}],
    },
    "startPosition": {"enqueuedTime": "2024-05-01T00:00:00Z"},
    "balancing": {"intervalSeconds": 5, "weighting": "count", "lagTolerance": 0.5},
    "processing": {"maxAttempts": 10, "onFailure": "park"},
    "paused": False,
    "serviceAccountName": "orders",
}
SPEC_PATHS = st.sampled_from(
    [
        ("eventHub",),
        ("eventHub", "fullyQualifiedNamespace"),
        ("eventHub", "name"),
        ("eventHub", "consumerGroup"),
        ("eventHub", "credentials"),
        ("eventHub", "credentials", "connectionStringSecretRef", "name"),
        ("eventHub", "credentials", "connectionStringSecretRef", "key"),
        ("eventHub", "credentials", "workloadIdentity"),
        ("checkpointStore", "containerName"),
        ("checkpointStore", "accountUrl"),
        ("checkpointStore", "credentials"),
        ("selector",),
        ("selector", "matchLabels"),
        ("selector", "matchLabels", "app"),
        ("selector", "matchLabels", "example.com/app"),
        ("selector", "matchExpressions"),
        ("startPosition",),
        ("startPosition", "enqueuedTime"),
        ("startPosition", "sequenceNumber"),
        ("balancing",),
        ("balancing", "intervalSeconds"),
        ("balancing", "weighting"),
        ("balancing", "lagTolerance"),
        ("processing",),
        ("processing", "maxAttempts"),
        ("processing", "onFailure"),
        ("paused",),
        ("serviceAccountName",),
    ]
)
#: A valid spec with one field replaced, or a whole arbitrary value.
SPECS = st.one_of(
    st.builds(replaced, st.just(SPEC), SPEC_PATHS, JSONISH),
    st.builds(
        lambda path, label: replaced(SPEC, path, label),
        st.sampled_from(
            [
                ("selector", "matchLabels", "app"),
                ("checkpointStore", "containerName"),
                ("checkpointStore", "accountUrl"),
                ("serviceAccountName",),
                ("startPosition", "enqueuedTime"),
                ("eventHub", "fullyQualifiedNamespace"),
                ("eventHub", "credentials", "connectionStringSecretRef", "name"),
                ("eventHub", "credentials", "connectionStringSecretRef", "key"),
            ]
        ),
        st.one_of(
            TEXT,
            TIMES,
            st.sampled_from(["https://shop.blob.core.windows.net\n"]),
            st.builds(
                lambda host, port: f"{host}:{port}",
                st.sampled_from(["127.0.0.1", "https://shop.blob.core.windows.net"]),
                st.integers(min_value=0, max_value=99999),
            ),
        ),
    ),
    JSONISH,
)

#: What the API server accepts, matched to the very end (Go's regexp ``$`` is the end of the
#: text; Python's also matches before a final newline).
LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
CONTAINER = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
#: A host as the endpoint check takes it (`endpoints`): DNS labels, none empty, none that
#: starts or ends with a dash.
HOST = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
ACCOUNT_URL = re.compile(rf"https://{HOST}(:(?P<port>[0-9]{{1,5}}))?/?")
NAMESPACE_HOST = re.compile(rf"{HOST}(:(?P<port>[0-9]{{1,5}}))?")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
#: An Event Hub's and a consumer group's names as Azure allows them (a group: at most 50).
ENTITY_NAME = re.compile(r"[A-Za-z0-9]([-._A-Za-z0-9]*[A-Za-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
INT64 = range(0, bounds.MAX_EPOCH + 1)


def port_usable(match: re.Match[str] | None) -> bool:
    """A host[:port] the API server admits and a client can dial: a port from 1 to 65535 (the
    resolver wraps 65536 and above round, onto another port)."""
    return match is not None and (match["port"] is None or 1 <= int(match["port"]) <= 65535)


def label_key_accepted(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (not prefix or DNS_SUBDOMAIN.fullmatch(prefix) is not None) and bool(
        LABEL_NAME.fullmatch(name) and name
    )


@FUZZ
@given(SPECS)
# What it found: names with a final newline (Python's "$" matches before it; the API server's
# patterns do not), a time that leaves the range in UTC, a year-1 time written as "1-01-01",
# a sequence number beyond int64.
@example(replaced(SPEC, ("selector", "matchLabels", "app"), "orders\n"))
@example(replaced(SPEC, ("checkpointStore", "containerName"), "checkpoints\n"))
@example(replaced(SPEC, ("checkpointStore", "accountUrl"), "https://shop.blob.core.windows.net\n"))
@example(replaced(SPEC, ("serviceAccountName",), "orders\n"))
@example(
    replaced(SPEC, ("eventHub", "fullyQualifiedNamespace"), "shop.servicebus.windows.net:99999")
)
@example(replaced(SPEC, ("checkpointStore", "accountUrl"), "https://shop.blob.core.windows.net:0"))
@example(replaced(SPEC, ("eventHub", "fullyQualifiedNamespace"), "shop..servicebus.windows.net"))
@example(replaced(SPEC, ("checkpointStore", "accountUrl"), "https://-shop.blob.core.windows.net"))
@example(
    replaced(SPEC, ("eventHub", "credentials", "connectionStringSecretRef", "name"), "Bad_Name")
)
@example(replaced(SPEC, ("eventHub", "credentials", "connectionStringSecretRef", "key"), "a b"))
@example(replaced(SPEC, ("eventHub", "name"), "orders\n"))
@example(replaced(SPEC, ("eventHub", "consumerGroup"), "$Default\n"))
@example(replaced(SPEC, ("startPosition",), {"enqueuedTime": "0001-01-01T00:00:00+01:00"}))
@example(replaced(SPEC, ("startPosition",), {"enqueuedTime": "0001-01-01T00:00:00Z"}))
@example(replaced(SPEC, ("startPosition",), {"sequenceNumber": 2**63}))
def test_parse_spec_gives_a_spec_the_api_server_and_the_pods_accept_or_invalid_input(
    spec: Any,
) -> None:
    try:
        parsed = specs.parse_spec(spec)
    except errors.InvalidInput:
        return
    assert CONTAINER.fullmatch(parsed.checkpoint_container)
    assert not parsed.checkpoint_account_url or port_usable(
        ACCOUNT_URL.fullmatch(parsed.checkpoint_account_url)
    )
    assert port_usable(NAMESPACE_HOST.fullmatch(parsed.fully_qualified_namespace))
    assert len(parsed.event_hub_name) <= 256
    assert ENTITY_NAME.fullmatch(parsed.event_hub_name)
    group = parsed.consumer_group
    assert len(group) <= 50
    assert group.lower() == "$default" or ENTITY_NAME.fullmatch(group)
    for credentials in (parsed.event_hub_credentials, parsed.checkpoint_credentials):
        if credentials.secret_ref is not None:
            assert DNS_SUBDOMAIN.fullmatch(credentials.secret_ref.name)
            assert SECRET_KEY.fullmatch(credentials.secret_ref.key)
    assert not parsed.service_account_name or DNS_SUBDOMAIN.fullmatch(parsed.service_account_name)
    selector = parsed.selector
    assert all(label_key_accepted(k) for k in selector.match_labels)
    assert all(LABEL_NAME.fullmatch(v) for v in selector.match_labels.values())
    for requirement in selector.match_expressions:
        assert label_key_accepted(requirement.key)
        assert all(LABEL_NAME.fullmatch(v) for v in requirement.values)
    if isinstance(parsed.start_position, startpositions.FromSequenceNumber):
        assert parsed.start_position.sequence_number in INT64
    # What the operator writes into each pod's ConfigMap, the pod reads back unchanged.
    data = podassignments.build_data(
        spec=parsed, consumer="c", pod="p", generation=1, partitions={}
    )
    read = podassignments.parse_data(data)
    assert read.problems == ()
    assert read.checkpoint_container == parsed.checkpoint_container
    assert startpositions.parse_start_position(read.start_position) == (
        startpositions.parse_start_position(json.loads(data[configmaps.KEY_START_POSITION]))
    )
    assert read.processing == parsed.processing


# -- connection strings (tests/contracts/test_connection_strings.py holds that the SDKs dial
# the host checked; here: any text at all gives a verdict, never a crash)

CONNECTION_STRINGS = st.one_of(
    st.text(max_size=80),
    st.lists(
        st.tuples(
            st.one_of(
                TEXT,
                st.sampled_from(["Endpoint", "BlobEndpoint", "AccountName", "Endpoint\n"]),
            ),
            st.one_of(
                TEXT,
                st.sampled_from(
                    ["sb://x.servicebus.windows.net/", "https://[::1", "https://x:99999", "true"]
                ),
            ),
        ),
        max_size=5,
    ).map(lambda pairs: ";".join(f"{k}={v}" for k, v in pairs)),
)
POLICY = endpoints.EndpointPolicy(allow_development=True)


@FUZZ
@given(CONNECTION_STRINGS)
@example("Endpoint\n=sb://x.servicebus.windows.net/")  # a key with a final newline
def test_a_connection_string_is_allowed_or_refused_by_the_projects_errors(text: str) -> None:
    for problem in (connectionstrings.eventhub_problem(text), connectionstrings.blob_problem(text)):
        assert problem is None or isinstance(problem, str)
    try:
        fields = endpoints.connection_string_fields(text, field="f")
    except errors.AmbiguousConnectionString:
        pass
    else:
        # "Plain ASCII letters", to the end: a key with a newline is another key to no one.
        assert all(re.fullmatch(r"[a-z]+", key) for key in fields)
    with contextlib.suppress(errors.EventHubBalancerError):
        POLICY.check_eventhub(fully_qualified_namespace="x", connection_string=text)
    with contextlib.suppress(errors.EventHubBalancerError):
        POLICY.check_blob(account_url=None, connection_string=text)
    with contextlib.suppress(errors.EventHubBalancerError):
        POLICY.check_blob(account_url=text, connection_string=None)
    with contextlib.suppress(errors.EventHubBalancerError):
        POLICY.check_eventhub(fully_qualified_namespace=text, connection_string=None)


# -- the pod's ConfigMap, as the pod reads it and as the operator reads it back

VALID_DATA = podassignments.build_data(
    spec=specs.parse_spec(SPEC),
    consumer="orders",
    pod="orders-0",
    generation=3,
    partitions={
        models.PartitionId("0"): podassignments.PartitionEntry(epoch=2),
        models.PartitionId("1"): podassignments.PartitionEntry(
            epoch=5, state="revoking", since=datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)
        ),
    },
)
DATA_KEYS = st.sampled_from(sorted(configmaps.DATA_KEYS))
#: Mostly well-formed entries, so that the odd field is what the parser meets (wholly
#: malformed text comes with `JSON_TEXT` below).
PARTITIONS_TEXT = st.dictionaries(
    st.sampled_from(["0", "7", "99999", "100000", "07", "7\n"]),
    st.fixed_dictionaries(
        {"epoch": st.one_of(st.integers(min_value=0, max_value=9), NUMBERS), "since": TIMES},
        optional={"state": st.sampled_from(["owned", "revoking", "gone"])},
    ),
    min_size=1,
    max_size=4,
).map(json.dumps)
DATA = st.one_of(
    st.builds(lambda value: {**VALID_DATA, configmaps.KEY_PARTITIONS: value}, PARTITIONS_TEXT),
    st.builds(lambda key, value: {**VALID_DATA, key: value}, DATA_KEYS, JSON_TEXT),
    st.builds(lambda key, value: {**VALID_DATA, key: value}, DATA_KEYS, JSONISH),
    st.dictionaries(st.one_of(DATA_KEYS, TEXT), st.one_of(JSON_TEXT, JSONISH), max_size=6),
    JSONISH,
)


@FUZZ
@given(DATA, st.one_of(st.none(), JSONISH))
# What it found: JSON nested past the decoder's recursion, a time that leaves the range in UTC.
@example({**VALID_DATA, configmaps.KEY_PARTITIONS: "[" * 5000}, None)
@example({**VALID_DATA, configmaps.KEY_START_POSITION: "[" * 5000}, None)
@example(
    {
        **VALID_DATA,
        configmaps.KEY_PARTITIONS: '{"0":{"epoch":1,"since":"0001-01-01T00:00:00+01:00"}}',
    },
    None,
)
def test_configmap_data_reads_as_an_assignment_with_its_problems_never_an_exception(
    data: Any, metadata: Any
) -> None:
    body = {"metadata": metadata, "data": data}
    configmaps.refusal(body, consumer="orders", pod="orders-0", pod_uid="u")
    assignment = assignments.from_configmap(body)  # the pod
    operator = podassignments.parse_data(data)  # the operator, reading it back
    for parsed in (assignment, operator):
        assert isinstance(parsed.processing, failurepolicy.Processing)
        assert parsed.generation in INT64
        for pid, entry in parsed.partitions.items():
            assert re.fullmatch(r"[0-9]+", pid)
            assert entry.epoch in INT64
            if entry.since is not None:
                # Written back by the operator, compared with now by both.
                timestamps.format_time(entry.since)
                podstates.to_seconds(entry.since)
    assert all(e.epoch <= bounds.MAX_FLOOR for e in assignment.partitions.values())
    try:
        start = startpositions.parse_start_position(assignment.start_position)
    except errors.InvalidInput:
        return
    startpositions.to_json(start)


# -- the acknowledgements and partition reports, as the operator reads them

ANNOTATION_VALUES = st.one_of(
    JSON_TEXT,
    st.dictionaries(
        st.one_of(TEXT, st.sampled_from(["0", "7", "7\n"])), st.one_of(NUMBERS, TEXT), max_size=4
    ).map(json.dumps),
    st.dictionaries(
        st.one_of(TEXT, st.sampled_from(["0", "7", "7\n"])),
        st.fixed_dictionaries(
            {
                "epoch": st.one_of(st.just(1), NUMBERS),
                "state": st.sampled_from([*partitionreports.REPORT_STATES, "gone"]),
            },
            optional={"attempts": st.one_of(NUMBERS, TEXT), "error": st.one_of(TEXT, JSONISH)},
        ),
        max_size=4,
    ).map(json.dumps),
    JSONISH,
)
ANNOTATIONS = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(configmaps.POD_WRITTEN_ANNOTATIONS), ANNOTATION_VALUES, max_size=3
    ),
)


@FUZZ
@given(ANNOTATIONS)
# What it found: JSON nested past the decoder's recursion, "7\n" read as a partition id, an
# attempts count beyond the status field's int64, a value that is not a string.
@example({configmaps.ANNOTATION_RELEASED: "[" * 5000})
@example({partitionreports.ANNOTATION: '{"0":' * 5000})
@example({configmaps.ANNOTATION_RELEASED: '{"7\\n":1}'})
@example({partitionreports.ANNOTATION: f'{{"0":{{"epoch":1,"state":"lost","attempts":{2**64}}}}}'})
@example({partitionreports.ANNOTATION: ["0"]})
def test_acknowledgements_and_reports_read_as_bounded_values_never_an_exception(
    annotations: Mapping[str, Any] | None,
) -> None:
    generation = configmaps.parse_applied_generation(annotations)
    assert generation is None or generation in INT64
    released = configmaps.parse_released(annotations)
    assert all(re.fullmatch(r"[0-9]+", p) and e in INT64 for p, e in released.items())
    current = {p: 1 for p in ("0", "7", "7\n")}
    reports = partitionreports.parse(annotations, current=current)
    for partition, report in reports.items():
        assert re.fullmatch(r"[0-9]+", partition)
        assert report.state in partitionreports.REPORT_STATES
        assert report.epoch in INT64
        assert report.attempts in INT64  # the status field is an int64
        assert len(report.error) <= partitionreports.MAX_ERROR_CHARS
        assert "\n" not in report.error
