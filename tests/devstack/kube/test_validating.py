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
    spec["checkpointStore"]["containerName"] = "Not_Valid"
    spec["eventHub"]["credentials"]["workloadIdentity"] = {}
    causes = _fields(validating.validate(example, schema))
    assert causes == {
        "spec.checkpointStore.containerName": "FieldValueInvalid",
        # One credential, not two: a CEL rule with a message (was maxProperties: 1). A
        # pattern's error does not keep the rules from running.
        "spec.eventHub.credentials": "FieldValueInvalid",
    }
    spec["balancing"]["podGraceSeconds"] = "20"
    causes = _fields(validating.validate(example, schema))
    assert causes == {
        "spec.balancing.podGraceSeconds": "FieldValueTypeInvalid",
        "spec.checkpointStore.containerName": "FieldValueInvalid",
        # A wrong type does: no rule runs, and the server says so.
        "<nil>": "FieldValueInvalid",
    }


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
