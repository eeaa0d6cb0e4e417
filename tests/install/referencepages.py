"""The EventHubConsumer reference page (docs/reference/eventhubconsumer.md), rendered from the CRD.

The CRD in crds/ is the one source of every field's type, default, bounds and description;
the page is its rendering, so the two never disagree: ``test_reference_page.py`` fails when
the page is not what this renders. Regenerate it after a CRD change with::

    .venv/bin/python -m tests.install.referencepages
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import yaml

from tests.support import paths

CRD_PATH = paths.REPOSITORY / "crds" / "eventhubconsumers.yaml"
PAGE_PATH = paths.REPOSITORY / "docs" / "reference" / "eventhubconsumer.md"


def _text(value: object) -> str:
    """One table cell: folded to one line, pipes and angle brackets escaped."""
    folded = " ".join(str(value).split())
    return folded.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: object) -> str:
    rendered = value if isinstance(value, str) else json.dumps(value)
    # A code span shows its text as is: only the table's pipes need escaping.
    return "`" + " ".join(rendered.split()).replace("|", "\\|") + "`"


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items') or {})}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map of {_type(schema['additionalProperties'])}"
    if kind is None and "anyOf" in schema:
        return "string or object"
    return str(kind or "any")


def _bounds(schema: dict[str, Any]) -> str:
    if schema.get("type") is None and "anyOf" in schema:
        # startPosition: a string by its pattern, or an object with one of the required keys.
        keys = [f"`{k}`" for branch in schema["anyOf"] for k in branch.get("required", [])]
        return f"a string matching {_code(schema['pattern'])}, or an object with one key: " + (
            " or ".join(keys)
        )
    parts = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(_code(v) for v in schema["enum"]))
    for key, label in (
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("minProperties", "keys ≥"),
        ("maxProperties", "keys ≤"),
    ):
        if key in schema:
            parts.append(f"{label} {schema[key]}")
    if "pattern" in schema:
        parts.append(f"pattern {_code(schema['pattern'])}")
    if "format" in schema:
        parts.append(f"format {schema['format']}")
    for key, label in (("additionalProperties", "each value"), ("items", "each item")):
        inner = schema.get(key)
        if isinstance(inner, dict) and not inner.get("properties") and _bounds(inner):
            parts.append(f"{label}: {_bounds(inner)}")
    return "; ".join(parts)


def _rows(
    schema: dict[str, Any], path: str, required: bool
) -> Iterator[tuple[str, str, str, str, str]]:
    default = _code(schema["default"]) if "default" in schema else ""
    yield (
        f"`{path}`" + (" (required)" if required else ""),
        _type(schema),
        default,
        _bounds(schema),
        _text(schema.get("description", "")),
    )
    children = schema.get("properties") or {}
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        children = schema["items"].get("properties") or {}
        path = f"{path}[]"
        needed = set(schema["items"].get("required") or [])
    else:
        needed = set(schema.get("required") or [])
    if "anyOf" in schema:  # startPosition: its object forms' fields
        needed = set()
    for name, child in children.items():
        yield from _rows(child, f"{path}.{name}", name in needed)


def _rules(schema: dict[str, Any], path: str) -> Iterator[tuple[str, str, str]]:
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path, rule["rule"], _text(rule.get("message", ""))
    for name, child in (schema.get("properties") or {}).items():
        yield from _rules(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _rules(schema["items"], f"{path}[]")


def render(crd: dict[str, Any]) -> str:
    names = crd["spec"]["names"]
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    api_version = f"{crd['spec']['group']}/{version['name']}"
    lines = [
        f"# {names['kind']} reference",
        "",
        "<!-- Generated from crds/eventhubconsumers.yaml by tests/install/referencepages.py;",
        "     tests/install/test_reference_page.py keeps it in sync. Edit the CRD, then run",
        "     .venv/bin/python -m tests.install.referencepages -->",
        "",
        f"`apiVersion: {api_version}`, `kind: {names['kind']}` (plural `{names['plural']}`, "
        f"short name `{', '.join(names.get('shortNames') or [])}`), namespaced, with a status "
        "subresource.",
        "",
        _text(schema.get("description", "")),
        "",
        "The [install guide](../install.md) has a complete example; the "
        "[operator](../operator.md) page says what each part of the status means in practice.",
        "",
    ]
    for part, title, intro in (
        ("spec", "spec", "What you declare. The operator never writes it."),
        ("status", "status", "What the operator observed and did. Only the operator writes it."),
    ):
        lines += [f"## {title}", "", intro, ""]
        lines += [
            "| field | type | default | allowed values | description |",
            "| --- | --- | --- | --- | --- |",
        ]
        part_schema = schema["properties"][part]
        needed = set(part_schema.get("required") or [])
        for name, child in (part_schema.get("properties") or {}).items():
            for row in _rows(child, f"{part}.{name}", name in needed):
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    rules = list(_rules(schema, ""))
    if rules:
        lines += [
            "## Validation rules",
            "",
            "Beyond the types and bounds above, the API server refuses an object that breaks one "
            "of these rules, with the message shown:",
            "",
            "| field | rule | message |",
            "| --- | --- | --- |",
        ]
        for path, rule, message in rules:
            lines.append(f"| `{path.lstrip('.')}` | {_code(rule)} | {message} |")
        lines.append("")
    lines += [
        "## Printer columns",
        "",
        "`kubectl get eventhubconsumers` shows:",
        "",
        "| column | from | meaning |",
        "| --- | --- | --- |",
    ]
    for column in version.get("additionalPrinterColumns") or []:
        lines.append(
            f"| {column['name']} | `{column['jsonPath']}` | "
            f"{_text(column.get('description', ''))} |"
        )
    lines.append("")
    return "\n".join(lines)


def rendered_page() -> str:
    return render(yaml.safe_load(CRD_PATH.read_text()))


def main() -> int:
    PAGE_PATH.parent.mkdir(exist_ok=True)
    PAGE_PATH.write_text(rendered_page())
    print(f"wrote {PAGE_PATH.relative_to(paths.REPOSITORY)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
