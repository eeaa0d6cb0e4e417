"""JSON values as a CRD schema's checks type them and as Go's field errors show them. Pure."""

from __future__ import annotations

import datetime
import json
from typing import Any


def shown(value: Any) -> str:
    """A value as Go's field errors print it: scalars as JSON, containers by their type."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return '"boolean"'
    if isinstance(value, int):
        return '"integer"'
    if isinstance(value, float):
        return '"number"'
    return '"string"' if isinstance(value, str) else shown(value)


def type_matches(value: Any, wanted: str) -> bool:
    if wanted == "object":
        return isinstance(value, dict)
    if wanted == "array":
        return isinstance(value, list)
    if wanted == "string":
        return isinstance(value, str)
    if wanted == "boolean":
        return isinstance(value, bool)
    if wanted == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if wanted == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def valid_date_time(text: str) -> bool:
    try:
        datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return "T" in text.upper()
