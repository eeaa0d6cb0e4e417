"""Validation of custom resources by the CRD's schema and CEL rules, as a real API server does."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventhub_balancer_devstack.kube import schemas, validating

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / "eventhubconsumers.yaml").read_text())
    result: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


@pytest.fixture
def example() -> dict[str, Any]:
    path = ROOT / "manifests" / "examples" / "20-eventhubconsumer.yaml"
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    return body


def _fields(causes: list[validating.Cause]) -> dict[str, str]:
    return {c["field"]: c["reason"] for c in causes}


def test_the_example_is_valid(schema: dict[str, Any], example: dict[str, Any]) -> None:
    assert validating.validate(example, schema) == []


def test_the_issue_s_bad_resource_is_refused_field_by_field(
    schema: dict[str, Any], example: dict[str, Any]
) -> None:
    del example["spec"]["eventHub"]
    example["spec"]["balancing"].update(intervalSeconds=-5, weighting="nonsense")
    causes = validating.validate(example, schema)
    assert _fields(causes) == {
        "spec.eventHub": "FieldValueRequired",
        "spec.balancing.intervalSeconds": "FieldValueInvalid",
        "spec.balancing.weighting": "FieldValueNotSupported",
        # As a real server says when such errors keep the CRD's CEL rules from running.
        "<nil>": "FieldValueInvalid",
    }
    summary = validating.summary(causes)
    assert "spec.balancing.intervalSeconds: Invalid value: -5" in summary
    assert 'supported values: "count", "lag"' in summary


def test_types_patterns_and_rules(schema: dict[str, Any], example: dict[str, Any]) -> None:
    spec = example["spec"]
    spec["selector"] = {"matchLabels": {"app": "not valid"}}
    spec["eventHub"]["credentials"]["workloadIdentity"] = {}
    causes = _fields(validating.validate(example, schema))
    assert causes == {
        "spec.selector.matchLabels.app": "FieldValueInvalid",
        # One credential, not two: a CEL rule with a message (was maxProperties: 1). A
        # pattern's error does not keep the rules from running.
        "spec.eventHub.credentials": "FieldValueInvalid",
    }
    spec["balancing"]["podGraceSeconds"] = "20"
    causes = _fields(validating.validate(example, schema))
    assert causes == {
        "spec.balancing.podGraceSeconds": "FieldValueTypeInvalid",
        "spec.selector.matchLabels.app": "FieldValueInvalid",
        # A wrong type does: no rule runs, and the server says so.
        "<nil>": "FieldValueInvalid",
    }


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("checkpointStore", "containerName"), "checkpoints\n"),
        (("eventHub", "fullyQualifiedNamespace"), "shop.servicebus.windows.net\n"),
        (("selector", "matchLabels", "app"), "orders\n"),
    ],
    ids=repr,
)
def test_a_pattern_ends_at_the_end_of_the_text_as_go_s_regexp_does(
    schema: dict[str, Any], example: dict[str, Any], path: tuple[str, ...], value: str
) -> None:
    """A real server matches a pattern with Go's regexp, whose ``$`` is the end of the text:
    a value with a final newline fails ``^...$``. Python's ``$`` also matches before it, and
    the local API admitted what a real one refuses."""
    node = example["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    field = "spec." + ".".join(path)
    assert _fields(validating.validate(example, schema)) == {field: "FieldValueInvalid"}


def test_the_cel_rule_of_the_checkpoint_store(
    schema: dict[str, Any], example: dict[str, Any]
) -> None:
    example["spec"]["checkpointStore"]["credentials"] = {"workloadIdentity": {}}
    [cause] = validating.validate(example, schema)
    assert cause["field"] == "spec.checkpointStore"
    assert "accountUrl is required with workloadIdentity" in cause["message"]
    example["spec"]["checkpointStore"]["accountUrl"] = "https://a.blob.core.windows.net"
    assert validating.validate(example, schema) == []


@pytest.mark.parametrize(
    ("position", "valid"),
    [
        ("earliest", True),
        ("latest", True),
        ({"sequenceNumber": 5}, True),
        ({"enqueuedTime": "2026-01-01T00:00:00Z"}, True),
        ("yesterday", False),
        ({"sequenceNumber": -1}, False),
        ({"sequenceNumber": 5, "enqueuedTime": "2026-01-01T00:00:00Z"}, False),
        ({"enqueuedTime": "not a time"}, False),
    ],
)
def test_start_position_one_of(
    schema: dict[str, Any], example: dict[str, Any], position: Any, valid: bool
) -> None:
    example["spec"]["startPosition"] = position
    assert (validating.validate(example, schema) == []) is valid


def test_status_conditions_are_checked_and_keyed_by_type(
    schema: dict[str, Any], example: dict[str, Any]
) -> None:
    ready = {"type": "Ready", "status": "True", "reason": "AllOwned", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    example["status"] = {"conditions": [ready]}
    assert validating.validate(example, schema) == []
    example["status"] = {"conditions": [ready, {**ready, "status": "Maybe"}]}
    assert _fields(validating.validate(example, schema)) == {
        "status.conditions[1]": "FieldValueDuplicate",
        "status.conditions[1].status": "FieldValueNotSupported",
        "<nil>": "FieldValueInvalid",
    }


def test_updates_ratchet_unchanged_invalid_parts(
    schema: dict[str, Any], example: dict[str, Any]
) -> None:
    old = copy.deepcopy(example)
    old["spec"]["balancing"]["intervalSeconds"] = 0  # stored before a stricter CRD, say
    new = copy.deepcopy(old)
    new["status"] = {"partitionCount": 4}
    assert validating.validate(new, schema, old=old) == []
    new["spec"]["balancing"]["maxMovesPerCycle"] = -1
    assert _fields(validating.validate(new, schema, old=old)) == {
        "spec.balancing.maxMovesPerCycle": "FieldValueInvalid"
    }


def test_defaults_come_before_validation(schema: dict[str, Any], example: dict[str, Any]) -> None:
    del example["spec"]["balancing"]
    schemas.apply_defaults(example, schema)
    assert example["spec"]["balancing"]["intervalSeconds"] == 5
    assert validating.validate(example, schema) == []


_NOT_CHECKED = (
    "<nil>",
    "FieldValueInvalid",
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
)

#: A spec change and the causes a real kube-apiserver answers it with, word for word: a value
#: of the wrong type is shown by its type, a float where an integer belongs is also refused by
#: its format, the keys of a map are joined with a dot, anyOf and not name their field in the
#: message only (and anyOf adds the first branch's errors), a date-time is a type.
REAL_CAUSES: list[tuple[str, dict[str, Any], list[tuple[str, str, str]]]] = [
    (
        "quoted-number",
        {"balancing": {"intervalSeconds": "5"}},
        [
            (
                "spec.balancing.intervalSeconds",
                "FieldValueTypeInvalid",
                'Invalid value: "string": spec.balancing.intervalSeconds in body must be of '
                'type integer: "string"',
            ),
            _NOT_CHECKED,
        ],
    ),
    (
        "fraction",
        {"balancing": {"intervalSeconds": 5.5}},
        [
            (
                "spec.balancing.intervalSeconds",
                "FieldValueTypeInvalid",
                'Invalid value: "number": spec.balancing.intervalSeconds in body must be of '
                'type integer: "number"',
            ),
            (
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer (default format) in '
                "spec.balancing.intervalSeconds",
            ),
            _NOT_CHECKED,
        ],
    ),
    (
        "fraction-int64",
        {"startPosition": {"sequenceNumber": 1.5}},
        [
            (
                "spec.startPosition.sequenceNumber",
                "FieldValueTypeInvalid",
                'Invalid value: "float64": spec.startPosition.sequenceNumber in body must be of '
                'type int64: "float64"',
            ),
            (
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer with format int64 in '
                "spec.startPosition.sequenceNumber",
            ),
            _NOT_CHECKED,
        ],
    ),
    (
        "boolean-for-number",
        {"balancing": {"lagTolerance": True}},
        [
            (
                "spec.balancing.lagTolerance",
                "FieldValueTypeInvalid",
                'Invalid value: "boolean": spec.balancing.lagTolerance in body must be of type '
                'number: "boolean"',
            ),
            _NOT_CHECKED,
        ],
    ),
    (
        "label-value-number",
        {"selector": {"matchLabels": {"app": 5}}},
        [
            (
                "spec.selector.matchLabels.app",
                "FieldValueTypeInvalid",
                'Invalid value: "integer": spec.selector.matchLabels.app in body must be of type '
                'string: "integer"',
            ),
            _NOT_CHECKED,
        ],
    ),
    (
        "label-value-space",
        {"selector": {"matchLabels": {"app": "a b"}}},
        [
            (
                "spec.selector.matchLabels.app",
                "FieldValueInvalid",
                'Invalid value: "a b": spec.selector.matchLabels.app in body should match '
                "'^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$'",
            ),
        ],
    ),
    (
        "start-position-number",
        {"startPosition": 5},
        [
            (
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "": "spec.startPosition" must not validate the schema (not)',
            ),
        ],
    ),
    (
        "start-position-unknown-key",
        {"startPosition": {"offset": 5}},
        [
            (
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "": "spec.startPosition" must validate at least one schema (anyOf)',
            ),
            ("spec.startPosition.sequenceNumber", "FieldValueRequired", "Required value"),
            _NOT_CHECKED,
        ],
    ),
    (
        "start-position-empty",
        {"startPosition": {}},
        [
            (
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "": "spec.startPosition" must validate at least one schema (anyOf)',
            ),
            ("spec.startPosition.sequenceNumber", "FieldValueRequired", "Required value"),
            (
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "": "spec.startPosition" must not validate the schema (not)',
            ),
            (
                "spec.startPosition",
                "FieldValueInvalid",
                "Invalid value: 0: spec.startPosition in body should have at least 1 properties",
            ),
            _NOT_CHECKED,
        ],
    ),
    (
        "start-time-words",
        {"startPosition": {"enqueuedTime": "yesterday"}},
        [
            (
                "spec.startPosition.enqueuedTime",
                "FieldValueTypeInvalid",
                'Invalid value: "yesterday": spec.startPosition.enqueuedTime in body must be of '
                'type date-time: "yesterday"',
            ),
            _NOT_CHECKED,
        ],
    ),
]


@pytest.mark.parametrize(
    ("change", "expected"), [c[1:] for c in REAL_CAUSES], ids=[c[0] for c in REAL_CAUSES]
)
def test_refusals_read_as_a_real_server_s(
    schema: dict[str, Any],
    example: dict[str, Any],
    change: dict[str, Any],
    expected: list[tuple[str, str, str]],
) -> None:
    example["spec"].update(change)
    causes = validating.validate(example, schema)
    assert [(c["field"], c["reason"], c["message"]) for c in causes] == expected
