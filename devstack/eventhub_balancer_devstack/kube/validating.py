"""Validation of custom resources by their CRD's OpenAPI v3 schema and CEL rules.

A real API server refuses a custom resource that breaks its CRD's schema (types, bounds,
``required``, ``enum``, ``pattern``, ``oneOf``...) or one of its ``x-kubernetes-validations``
rules, with a 422 whose ``details.causes`` name each field. Without this, tests would hand the
operator resources that could never reach it in a cluster. Updates are ratcheted as since
Kubernetes 1.30: a part of the object that did not change is not validated again.

Pure: a body and a schema in, a list of causes out.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

from eventhub_balancer_devstack.kube import expressions, jsonvalues

#: Root fields the schema does not govern (metadata is validated as for every kind).
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")

CauseReason = Literal[
    "FieldValueRequired",
    "FieldValueInvalid",
    "FieldValueNotSupported",
    "FieldValueTypeInvalid",
    "FieldValueDuplicate",
    "FieldValueTooMany",
    "FieldValueTooLong",
    "FieldValueForbidden",
]


class Cause(TypedDict):
    """One entry of a ``Status``'s ``details.causes``, as the API server writes it."""

    reason: CauseReason
    message: str
    field: str


_ABSENT = object()


def _items(count: int) -> str:
    """Go's field.TooMany: "item" for one, "items" otherwise."""
    return "item" if count == 1 else "items"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Validator:
    def __init__(self) -> None:
        self.causes: list[Cause] = []
        #: What the CEL rules say, apart: they count only when the schema's errors let them.
        self.rule_causes: list[Cause] = []

    def add(self, reason: CauseReason, field: str, message: str) -> None:
        self.causes.append({"reason": reason, "message": message, "field": field})

    def invalid(self, field: str, value: Any, detail: str) -> None:
        self.add("FieldValueInvalid", field, f"Invalid value: {jsonvalues.shown(value)}: {detail}")

    # -- the walk ------------------------------------------------------------------------------

    def walk(
        self, value: Any, schema: Mapping[str, Any], path: str, old: Any, *, root: bool = False
    ) -> None:
        if old is not _ABSENT and old == value:
            return  # ratcheting: an unchanged part is not validated again
        if value is None:
            if not schema.get("nullable"):
                self.add("FieldValueTypeInvalid", path, "Invalid value: null: must not be null")
            return
        wanted = schema.get("type")
        if schema.get("x-kubernetes-int-or-string"):
            if not (isinstance(value, str) or jsonvalues.type_matches(value, "integer")):
                self.add(
                    "FieldValueTypeInvalid",
                    path,
                    f"Invalid value: {jsonvalues.shown(value)}: {path} in body must be of type "
                    "integer-or-string",
                )
                return
        elif isinstance(wanted, str) and not jsonvalues.type_matches(value, wanted):
            self.wrong_type(value, wanted, schema.get("format"), path)
            return
        # In a real server's order: the combinators, then the value's own checks and fields.
        for combinator in ("allOf", "anyOf", "oneOf", "not"):
            if combinator in schema:
                self.combine(combinator, value, schema[combinator], path)
        self.values(value, schema, path)
        if isinstance(value, dict):
            self.properties(value, schema, path, old, root=root)
        elif isinstance(value, list):
            self.items(value, schema, path, old)
        self.rules(value, schema, path, old)

    def wrong_type(self, value: Any, wanted: str, format_: Any, path: str) -> None:
        """A value of another JSON type, shown by its type as a real server shows it; a
        fraction where an integer belongs is also refused by the integer's format."""
        shown, named = jsonvalues.json_type(value), wanted
        fraction = wanted == "integer" and isinstance(value, float)
        if fraction and format_ in ("int32", "int64"):
            shown, named = '"float64"', str(format_)
        self.add(
            "FieldValueTypeInvalid",
            path,
            f"Invalid value: {shown}: {path} in body must be of type {named}: {shown}",
        )
        if fraction:
            checked = (
                f"with format {format_}" if format_ in ("int32", "int64") else "(default format)"
            )
            self.add(
                "FieldValueInvalid",
                "<nil>",
                f'Invalid value: "": Checked value must be of type integer {checked} in {path}',
            )

    def values(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        enum = schema.get("enum")
        if isinstance(enum, list) and value not in enum:
            supported = ", ".join(jsonvalues.shown(v) for v in enum)
            self.add(
                "FieldValueNotSupported",
                path,
                f"Unsupported value: {jsonvalues.shown(value)}: supported values: {supported}",
            )
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.bounds(value, schema, path)
        if isinstance(value, str):
            min_length, max_length = schema.get("minLength"), schema.get("maxLength")
            if isinstance(min_length, int) and len(value) < min_length:
                self.invalid(
                    path, value, f"{path} in body should be at least {min_length} chars long"
                )
            if isinstance(max_length, int) and len(value) > max_length:
                self.add(
                    "FieldValueTooLong",
                    path,
                    f"Too long: may not be more than {max_length} bytes",
                )
            pattern = schema.get("pattern")
            if isinstance(pattern, str) and not expressions.matches(pattern, value):
                self.invalid(path, value, f"{path} in body should match '{pattern}'")
            if schema.get("format") == "date-time" and not jsonvalues.valid_date_time(value):
                # A format is a type to a real server: the error keeps the CEL rules from running.
                self.add(
                    "FieldValueTypeInvalid",
                    path,
                    f"Invalid value: {jsonvalues.shown(value)}: {path} in body must be of type "
                    f"date-time: {jsonvalues.shown(value)}",
                )
        if isinstance(value, dict):
            lowest, highest = schema.get("minProperties"), schema.get("maxProperties")
            if isinstance(lowest, int) and len(value) < lowest:
                self.invalid(
                    path, len(value), f"{path} in body should have at least {lowest} properties"
                )
            if isinstance(highest, int) and len(value) > highest:
                self.add(
                    "FieldValueTooMany",
                    path,
                    f"Too many: {len(value)}: must have at most {highest} {_items(highest)}",
                )
        if isinstance(value, list):
            lowest, highest = schema.get("minItems"), schema.get("maxItems")
            if isinstance(lowest, int) and len(value) < lowest:
                self.invalid(
                    path, len(value), f"{path} in body should have at least {lowest} items"
                )
            if isinstance(highest, int) and len(value) > highest:
                self.add(
                    "FieldValueTooMany",
                    path,
                    f"Too many: {len(value)}: must have at most {highest} {_items(highest)}",
                )

    def bounds(self, value: float, schema: Mapping[str, Any], path: str) -> None:
        minimum, maximum = schema.get("minimum"), schema.get("maximum")
        if isinstance(minimum, int | float):
            if schema.get("exclusiveMinimum") and value <= minimum:
                self.invalid(path, value, f"{path} in body should be greater than {minimum}")
            elif value < minimum:
                self.invalid(
                    path, value, f"{path} in body should be greater than or equal to {minimum}"
                )
        if isinstance(maximum, int | float):
            if schema.get("exclusiveMaximum") and value >= maximum:
                self.invalid(path, value, f"{path} in body should be less than {maximum}")
            elif value > maximum:
                self.invalid(
                    path, value, f"{path} in body should be less than or equal to {maximum}"
                )
        multiple = schema.get("multipleOf")
        if isinstance(multiple, int | float) and multiple and value % multiple:
            self.invalid(path, value, f"{path} in body should be a multiple of {multiple}")

    def properties(
        self,
        value: dict[str, Any],
        schema: Mapping[str, Any],
        path: str,
        old: Any,
        *,
        root: bool,
    ) -> None:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value or value[key] is None:
                self.add("FieldValueRequired", _join(path, key), "Required value")
        additional = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for key, item in value.items():
            if root and key in _ROOT_FIELDS:
                continue
            sub = properties.get(key)
            if not isinstance(sub, Mapping) and isinstance(additional, Mapping):
                sub = additional
            field = _join(path, key)  # a map's keys too, as a real server names them
            if isinstance(sub, Mapping):
                self.walk(item, sub, field, old_map.get(key, _ABSENT))

    def items(self, value: list[Any], schema: Mapping[str, Any], path: str, old: Any) -> None:
        item_schema = schema.get("items")
        list_type = schema.get("x-kubernetes-list-type")
        map_keys: Sequence[str] = schema.get("x-kubernetes-list-map-keys") or ()
        old_items = old if isinstance(old, list) else []
        seen: set[str] = set()
        # A map list's old items by their keys, the first of each as a scan would find it:
        # one pass, not one scan of the old list per item (1,024 epochs in a status record
        # made every patch of it a million comparisons).
        old_by_key: dict[str, Any] = {}
        if list_type == "map":
            for o in old_items:
                if isinstance(o, dict):
                    old_by_key.setdefault(_map_key(o, map_keys), o)
        for index, item in enumerate(value):
            field = f"{path}[{index}]"
            old_item: Any = _ABSENT
            if list_type == "map" and isinstance(item, dict):
                key = _map_key(item, map_keys)
                if key in seen:
                    self.add(
                        "FieldValueDuplicate",
                        field,
                        f"Duplicate value: {json.dumps({k: item.get(k) for k in map_keys})}",
                    )
                seen.add(key)
                old_item = old_by_key.get(key, _ABSENT)
            elif list_type == "set":
                key = json.dumps(item, sort_keys=True)
                if key in seen:
                    self.add(
                        "FieldValueDuplicate", field, f"Duplicate value: {jsonvalues.shown(item)}"
                    )
                seen.add(key)
            if isinstance(item_schema, Mapping):
                self.walk(item, item_schema, field, old_item)

    def combine(self, combinator: str, value: Any, branches: Any, path: str) -> None:
        """A combinator's refusal as a real server words it: the field only in the message,
        and, for anyOf and oneOf that no branch passes, the first branch's own errors."""

        def failures(branch: Mapping[str, Any]) -> list[Cause]:
            probe = _Validator()
            probe.walk(value, branch, path, _ABSENT)
            return probe.causes

        def refuse(words: str) -> None:
            self.add("FieldValueInvalid", "<nil>", f'Invalid value: "": "{path}" must {words}')

        if combinator == "not":
            if isinstance(branches, Mapping) and not failures(branches):
                refuse("not validate the schema (not)")
            return
        found = [failures(b) for b in branches if isinstance(b, Mapping)]
        passed = sum(1 for f in found if not f)
        if combinator == "allOf" and passed < len(found):
            refuse("validate all the schemas (allOf)")
            self.causes.extend(c for f in found for c in f)
        elif combinator == "anyOf" and not passed and found:
            refuse("validate at least one schema (anyOf)")
            self.causes.extend(found[0])
        elif combinator == "oneOf" and passed != 1:
            refuse("validate one and only one schema (oneOf)")
            if not passed and found:
                self.causes.extend(found[0])

    def rules(self, value: Any, schema: Mapping[str, Any], path: str, old: Any) -> None:
        found = _Validator()
        for rule in schema.get("x-kubernetes-validations") or ():
            if not isinstance(rule, Mapping) or not isinstance(rule.get("rule"), str):
                continue
            text: str = rule["rule"]
            variables: dict[str, Any] = {"self": value}
            if "oldSelf" in text:
                if old is _ABSENT and not rule.get("optionalOldSelf"):
                    continue  # a transition rule: only on updates that have an old value
                variables["oldSelf"] = None if old is _ABSENT else old
            field = (
                _join(path, str(rule["fieldPath"]).lstrip(".")) if rule.get("fieldPath") else path
            )
            try:
                passed = expressions.evaluate(text, variables) is True
            except expressions.ExpressionError as e:
                found.invalid(field, value, f"evaluation of rule {text!r} failed: {e}")
                continue
            if passed:
                continue
            message = rule.get("message") or f"failed rule: {text}"
            if isinstance(rule.get("messageExpression"), str):
                # The server falls back to message when the expression fails.
                with contextlib.suppress(expressions.ExpressionError):
                    message = str(expressions.evaluate(rule["messageExpression"], variables))
            if rule.get("reason") == "FieldValueRequired":
                found.add("FieldValueRequired", field, f"Required value: {message}")
            elif isinstance(value, dict | list):
                # The real server shows no value for an object or a list that fails a rule.
                found.add("FieldValueInvalid", field, f"Invalid value: {message}")
            else:
                found.invalid(field, value, str(message))
        self.rule_causes.extend(found.causes)


def validate(
    body: Mapping[str, Any], schema: Mapping[str, Any], *, old: Mapping[str, Any] | None = None
) -> list[Cause]:
    """The schema's and its rules' complaints about ``body`` (empty if valid).

    ``old`` is the stored object on an update: the parts that are equal in both are not
    checked again (ratcheting), so a status write never fails on an old spec.
    """
    validator = _Validator()
    validator.walk(dict(body), schema, "", _ABSENT if old is None else dict(old), root=True)
    if not any(c["reason"] in _BLOCKING for c in validator.causes):
        return validator.causes + validator.rule_causes
    # As the real server: a wrong type, a missing field, a value out of an enum or a size
    # limit stops the rules of the whole object, and says so when there were rules to run.
    if _has_rules(schema):
        return [*validator.causes, _RULES_NOT_CHECKED]
    return validator.causes


#: Schema errors after which no CEL rule of the object runs (apiextensions' hasBlockingErr).
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)

_RULES_NOT_CHECKED: Cause = {
    "reason": "FieldValueInvalid",
    "message": "Invalid value: null: some validation rules were not checked because the object "
    "was invalid; correct the existing errors to complete validation",
    "field": "<nil>",
}


def _has_rules(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "x-kubernetes-validations" in schema or any(_has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_rules(v) for v in schema)
    return False


def summary(causes: Sequence[Cause]) -> str:
    """The causes as the API server's message lists them (``field: message, ...``)."""
    parts = [f"{c['field']}: {c['message']}" if c["field"] else c["message"] for c in causes]
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


def _map_key(item: Mapping[str, Any], map_keys: Sequence[str]) -> str:
    """A map list item's identity: its key fields' values (absent ones as null)."""
    return json.dumps({k: item.get(k) for k in map_keys}, sort_keys=True)
