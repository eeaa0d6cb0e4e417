"""Defaulting and pruning of custom resources by their CRD's schema, as a real API server does."""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.kube import schemas

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "interval": {"type": "integer", "default": 5},
                "nested": {
                    "type": "object",
                    "default": {},
                    "properties": {"x": {"type": "string", "default": "d"}},
                },
                "items": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"n": {"type": "string"}}},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "properties": {"known": {"type": "integer"}}},
    },
}


def test_defaults_fill_absent_fields_recursively() -> None:
    body = {"metadata": {"name": "x"}, "spec": {"items": []}}
    schemas.apply_defaults(body, SCHEMA)
    assert body["spec"] == {"items": [], "interval": 5, "nested": {"x": "d"}}


def test_defaults_do_not_override_given_values() -> None:
    body = {"spec": {"interval": 7}}
    schemas.apply_defaults(body, SCHEMA)
    assert body["spec"]["interval"] == 7


def test_pruning_drops_unknown_fields_but_keeps_preserved_and_maps() -> None:
    body = {
        "apiVersion": "g/v1",
        "kind": "K",
        "metadata": {"name": "x", "anything": 1},
        "spec": {
            "unknown": 1,
            "items": [{"n": "a", "extra": 1}],
            "labels": {"a": "b"},
            "free": {"whatever": {"deep": 1}},
        },
        "status": {"known": 1, "unknown": 2},
        "top": 1,
    }
    schemas.prune(body, SCHEMA)
    assert body == {
        "apiVersion": "g/v1",
        "kind": "K",
        "metadata": {"name": "x", "anything": 1},
        "spec": {"items": [{"n": "a"}], "labels": {"a": "b"}, "free": {"whatever": {"deep": 1}}},
        "status": {"known": 1},
    }


def test_a_null_is_defaulted_or_dropped_as_if_absent() -> None:
    """A YAML key left empty (``balancing:`` with its lines commented out) arrives as null. A
    real API server takes it as absent: a field with a default gets the default, one without
    is dropped (and then ``required`` speaks, not "must not be null")."""
    body: dict[str, Any] = {
        "spec": {"interval": None, "nested": None, "labels": None, "free": {"kept": None}},
        "status": {"known": None},
    }
    schemas.prune(body, SCHEMA)
    schemas.apply_defaults(body, SCHEMA)
    assert body == {
        "spec": {"interval": 5, "nested": {"x": "d"}, "free": {"kept": None}},
        "status": {},
    }
