"""Kubernetes label selectors as the EventHubConsumer's ``spec.selector`` holds them.

Apart from ``contracts.specs`` because a selector is a concern of its own: the operator
parses it once with the spec, then evaluates it the way the API server does (`Selector.matches`
on pods it watches) and hands it to list calls (`Selector.to_query`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, TypedDict

from eventhub_balancer import errors

#: The operators of ``matchExpressions``, as the API server accepts them.
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

#: A label name (a key's last part, or a value): what the API server accepts, so that a
#: selector the CRD lets through can never make every list call fail (a value with a space).
#: ``\Z``, not ``$``: Python's ``$`` also matches before a final newline, the API server's not.
_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")
#: A key's optional prefix: a DNS subdomain.
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
#: The label every pod of the consumer chart carries (key, value), and the selector on it that
#: ``ehb operator --pod-selector`` is documented with (docs/operator.md): it selects the
#: consumer pods apart from other workloads' pods.
CONSUMER_POD_LABEL = ("app.kubernetes.io/part-of", "eventhub-balancer")
CONSUMER_PODS = "=".join(CONSUMER_POD_LABEL)
#: The API server's limits: 63 characters for a name or value, 253 for a key's prefix.
MAX_NAME = 63
MAX_PREFIX = 253


class SelectorRequirementBody(TypedDict, total=False):
    key: str
    operator: str
    values: list[str]


class SelectorBody(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[SelectorRequirementBody]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Selector:
    """A Kubernetes label selector; `matches` evaluates it the way the API server does."""

    match_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and not (present and labels[req.key] in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True

    def both(self, other: Selector | None) -> Selector:
        """The pods that both select (``other`` None: every pod), as one selector: the
        requirements of both, as the API server ANDs those of a query."""
        if other is None:
            return self
        labels = dict(self.match_labels)
        expressions = list(self.match_expressions)
        for key, value in other.match_labels.items():
            if labels.setdefault(key, value) != value:
                expressions.append(LabelRequirement(key=key, operator="In", values=(value,)))
        expressions += [e for e in other.match_expressions if e not in expressions]
        return Selector(match_labels=labels, match_expressions=tuple(expressions))

    def to_query(self) -> str:
        """The selector as a ``labelSelector`` query string for list calls."""
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for req in self.match_expressions:
            if req.operator == "Exists":
                parts.append(req.key)
            elif req.operator == "DoesNotExist":
                parts.append(f"!{req.key}")
            else:
                op = "in" if req.operator == "In" else "notin"
                parts.append(f"{req.key} {op} ({','.join(req.values)})")
        return ",".join(parts)


def parse_selector(value: Any, *, field: str) -> Selector:
    """The selector at ``field`` (``spec.selector``), validated; every problem is an
    InvalidInput naming the field to change."""
    if not isinstance(value, Mapping) or not value:
        raise errors.InvalidInput(
            field,
            "is required: set matchLabels (and/or matchExpressions) that select the "
            "consumer pods, as in their Deployment",
        )
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise errors.InvalidInput(f"{field}.matchLabels", "must map label keys to string values")
    for key, label in labels.items():
        check_key(key, field=f"{field}.matchLabels")
        check_value(label, field=f"{field}.matchLabels[{key}]")
    requirements = []
    raw_expressions = value.get("matchExpressions") or []
    if not isinstance(raw_expressions, list):
        raise errors.InvalidInput(f"{field}.matchExpressions", "must be a list")
    for i, raw in enumerate(raw_expressions):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(raw, Mapping):
            raise errors.InvalidInput(where, "must be an object with key and operator")
        key = _key(raw, f"{where}.key")
        op = raw.get("operator")
        if op not in OPERATORS:
            raise errors.InvalidInput(
                f"{where}.operator", f"{op!r}: use one of {', '.join(OPERATORS)}"
            )
        values = raw.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise errors.InvalidInput(f"{where}.values", "must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise errors.InvalidInput(f"{where}.values", f"must not be empty with {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise errors.InvalidInput(f"{where}.values", f"must be empty with {op}")
        for j, label in enumerate(values):
            check_value(label, field=f"{where}.values[{j}]")
        requirements.append(LabelRequirement(key=key, operator=op, values=tuple(values)))
    if not labels and not requirements:
        raise errors.InvalidInput(
            field, "selects every pod in the namespace: set matchLabels or matchExpressions"
        )
    return Selector(match_labels=dict(labels), match_expressions=tuple(requirements))


def parse_query(text: str, *, field: str) -> Selector:
    """A selector written as ``kubectl -l`` takes it (``app=orders,tier in (a,b),!legacy``),
    validated; every problem is an InvalidInput naming ``field``. The empty text selects
    every pod."""
    requirements: list[LabelRequirement] = []
    labels: dict[str, str] = {}
    for part in _split(text, field=field):
        match = _QUERY_PART.match(part)
        if match is None or (match["not"] and (match["op"] or match["set_op"])):
            raise errors.InvalidInput(
                field,
                f"{part!r} is not a requirement: use key=value, key!=value, key in (a,b), "
                "key notin (a,b), key or !key, separated by commas",
            )
        key = match["key"]
        check_key(key, field=field)
        if match["set_op"]:
            values = tuple(v.strip() for v in match["set"].split(","))
            if values == ("",):
                raise errors.InvalidInput(field, f"{part!r}: name at least one value")
            operator = "In" if match["set_op"] == "in" else "NotIn"
        elif match["op"]:
            values = (match["value"],)
            operator = "NotIn" if match["op"] == "!=" else "In"
        else:
            values, operator = (), "DoesNotExist" if match["not"] else "Exists"
        for value in values:
            check_value(value, field=field)
        # key=value goes where matchLabels holds it, unless the key has another value there.
        equals = match["op"] in ("=", "==")
        if equals and labels.get(key, values[0]) == values[0]:
            labels[key] = values[0]
        else:
            requirements.append(LabelRequirement(key=key, operator=operator, values=values))
    return Selector(match_labels=labels, match_expressions=tuple(requirements))


#: One requirement of a written selector: ``!key``, ``key``, ``key=v``, ``key==v``,
#: ``key!=v``, ``key in (a,b)``, ``key notin (a,b)``.
_QUERY_PART = re.compile(
    r"^(?P<not>!)?\s*(?P<key>[^\s=!(),]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[^\s=!(),]*)|\s(?P<set_op>in|notin)\s*\((?P<set>[^()]*)\))?"
    r"\s*\Z"
)


def _split(text: str, *, field: str) -> list[str]:
    """The requirements of a written selector: split at the commas outside parentheses."""
    parts: list[str] = []
    depth = start = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth not in (0, 1):
            raise errors.InvalidInput(field, f"{text!r}: unbalanced parentheses")
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise errors.InvalidInput(field, f"{text!r}: unbalanced parentheses")
    parts.append(text[start:].strip())
    return [] if parts == [""] else parts


def _key(raw: Mapping[str, Any], field: str) -> str:
    value = raw.get("key")
    if value is None:
        raise errors.InvalidInput(field, "is required")
    if not isinstance(value, str) or not value:
        raise errors.InvalidInput(field, "must be a non-empty string")
    check_key(value, field=field)
    return value


def check_key(key: str, *, field: str) -> None:
    """A label key as the API server accepts it: ``[prefix/]name``."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > MAX_PREFIX or not _PREFIX.match(prefix)):
        raise errors.InvalidInput(
            field, f"label key {key!r}: its prefix must be a DNS subdomain (like example.com)"
        )
    if not name or len(name) > MAX_NAME or not _NAME.match(name):
        raise errors.InvalidInput(
            field,
            f"label key {key!r}: use at most {MAX_NAME} letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit",
        )


def check_value(value: str, *, field: str) -> None:
    """A label value as the API server accepts it (it may be empty)."""
    if len(value) > MAX_NAME or not _NAME.match(value):
        raise errors.InvalidInput(
            field,
            f"label value {value!r}: use at most {MAX_NAME} letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit",
        )
