"""Label and field selectors, parsed from query strings and matched against object bodies.

The grammar is the API server's: labels support ``=``, ``==``, ``!=``, ``in``, ``notin``,
``key`` (exists) and ``!key``; fields support ``=``, ``==`` and ``!=`` on dotted paths.
Pure: no I/O, so the rules are tested without a server.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal

LabelOp = Literal["=", "!=", "in", "notin", "exists", "!exists"]
FieldOp = Literal["=", "!="]

_SET_TERM = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)\s*$")
_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class SelectorError(ValueError):
    """A selector string that the API server would reject with 400 Bad Request."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelRequirement:
    key: str
    op: LabelOp
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" also match objects without the label, as in Kubernetes.
        return value not in self.values


@dataclasses.dataclass(frozen=True, kw_only=True)
class FieldRequirement:
    path: str
    op: FieldOp
    value: str

    def matches(self, body: Mapping[str, Any]) -> bool:
        actual = field_value(body, self.path)
        return (actual == self.value) if self.op == "=" else (actual != self.value)


def _split_terms(text: str) -> list[str]:
    # Commas inside "in (a, b)" do not separate terms.
    terms: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    if depth != 0:
        raise SelectorError(f"unbalanced parentheses in selector {text!r}")
    return [term.strip() for term in terms if term.strip()]


def _check_key(key: str, text: str) -> str:
    if not _KEY.match(key):
        raise SelectorError(f"invalid label key {key!r} in selector {text!r}")
    return key


def parse_labels(text: str | None) -> tuple[LabelRequirement, ...]:
    """Parse a ``labelSelector`` query value; an empty or missing one selects everything."""
    if not text:
        return ()
    requirements = []
    for term in _split_terms(text):
        match = _SET_TERM.match(term)
        if match:
            values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
            op: LabelOp = "in" if match["op"] == "in" else "notin"
            requirements.append(
                LabelRequirement(key=_check_key(match["key"], text), op=op, values=values)
            )
        elif "!=" in term:
            key, value = term.split("!=", 1)
            requirements.append(
                LabelRequirement(
                    key=_check_key(key.strip(), text), op="!=", values=frozenset({value.strip()})
                )
            )
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            requirements.append(
                LabelRequirement(
                    key=_check_key(key.strip(), text), op="=", values=frozenset({value.strip()})
                )
            )
        elif term.startswith("!"):
            requirements.append(
                LabelRequirement(key=_check_key(term[1:].strip(), text), op="!exists")
            )
        else:
            requirements.append(LabelRequirement(key=_check_key(term, text), op="exists"))
    return tuple(requirements)


def parse_fields(text: str | None) -> tuple[FieldRequirement, ...]:
    """Parse a ``fieldSelector`` query value (any dotted path, e.g. ``status.phase``)."""
    if not text:
        return ()
    requirements = []
    for term in _split_terms(text):
        if "!=" in term:
            path, value = term.split("!=", 1)
            op: FieldOp = "!="
        elif "==" in term:
            path, value = term.split("==", 1)
            op = "="
        elif "=" in term:
            path, value = term.split("=", 1)
            op = "="
        else:
            raise SelectorError(f"invalid field selector term {term!r}: expected path=value")
        if not path.strip():
            raise SelectorError(f"invalid field selector term {term!r}: empty field path")
        requirements.append(FieldRequirement(path=path.strip(), op=op, value=value.strip()))
    return tuple(requirements)


def field_value(body: Mapping[str, Any], path: str) -> str:
    """The value at a dotted path as the API server compares it: a string, ``""`` if absent."""
    node: Any = body
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Selector:
    """Both selectors of one request; an object matches when every requirement holds."""

    labels: tuple[LabelRequirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()

    def matches(self, body: Mapping[str, Any]) -> bool:
        metadata = body.get("metadata") or {}
        labels = metadata.get("labels") or {}
        return all(r.matches(labels) for r in self.labels) and all(
            r.matches(body) for r in self.fields
        )


def parse(*, labels: str | None, fields: str | None) -> Selector:
    return Selector(labels=parse_labels(labels), fields=parse_fields(fields))
