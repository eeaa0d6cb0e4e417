"""Table responses (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``) for ``kubectl get``.

kubectl asks the server how to print a kind: a real server answers with a ``Table`` whose
columns are a CRD's ``additionalPrinterColumns`` (after NAME) or a built-in kind's usual ones.
Without it, ``kubectl get ehc -o wide`` shows only NAME and AGE and none of the columns the
CRD promises. Pure: objects and a clock in, a Table body out.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict

from eventhub_balancer_devstack.kube import resources


class ColumnDefinition(TypedDict):
    name: str
    type: str
    format: str
    description: str
    priority: int


class TableRow(TypedDict):
    cells: list[Any]
    object: dict[str, Any]


_NAME: ColumnDefinition = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a Table (kubectl's ``as=Table;...;g=meta.k8s.io``)."""
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


# -- JSONPath, the subset printer columns use ---------------------------------------------------

_STEP = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_-]+)
      | \[(?P<index>\*|-?\d+)\]
      | \[\?\(@\.(?P<filter_field>[A-Za-z0-9_.-]+)\s*==\s*
            (?P<filter_value>"[^"]*"|'[^']*'|-?\d+)\)\]
    """,
    re.VERBOSE,
)


def evaluate_path(value: Any, path: str) -> list[Any]:
    """Values at a kubectl JSONPath, e.g. ``.status.conditions[?(@.type=="Ready")].status``."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    current = [value]
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            return []  # an expression this subset does not know: an empty cell
        position = match.end()
        following: list[Any] = []
        for item in current:
            if match["field"] is not None:
                if isinstance(item, dict) and match["field"] in item:
                    following.append(item[match["field"]])
            elif match["index"] is not None:
                if isinstance(item, list):
                    if match["index"] == "*":
                        following.extend(item)
                    elif -len(item) <= int(match["index"]) < len(item):
                        following.append(item[int(match["index"])])
            else:
                wanted = json.loads(match["filter_value"].replace("'", '"'))
                keys = match["filter_field"].split(".")
                for element in item if isinstance(item, list) else []:
                    probe = element
                    for key in keys:
                        probe = probe.get(key) if isinstance(probe, dict) else None
                    if probe == wanted:
                        following.append(element)
        current = following
    return current


# -- cells ---------------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """An age as kubectl prints it (``45s``, ``3m12s``, ``5h``, ``2d3h``): Go's HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(timestamp: Any, now: datetime.datetime) -> str:
    if not isinstance(timestamp, str):
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration((now - then).total_seconds())


def _cell(values: list[Any], column_type: str, now: datetime.datetime) -> Any:
    if not values:
        return None
    value = values[0] if len(values) == 1 else ",".join(str(v) for v in values)
    if column_type == "date":
        return _age(value, now)
    if column_type == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if column_type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if column_type == "boolean" and isinstance(value, bool):
        return value
    return value if isinstance(value, str) else json.dumps(value)


# -- the columns of each kind ---------------------------------------------------------------------

Cells = Callable[[Mapping[str, Any], datetime.datetime], list[Any]]


def _column(
    name: str, description: str = "", *, kind: str = "string", priority: int = 0
) -> ColumnDefinition:
    return {
        "name": name,
        "type": kind,
        "format": "",
        "description": description,
        "priority": priority,
    }


def _age_column() -> ColumnDefinition:
    return _column("Age", "CreationTimestamp is the time the object was created.")


def _created(body: Mapping[str, Any], now: datetime.datetime) -> str:
    return _age((body.get("metadata") or {}).get("creationTimestamp"), now)


def _pod_cells(body: Mapping[str, Any], now: datetime.datetime) -> list[Any]:
    spec, status = body.get("spec") or {}, body.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    phase = status.get("phase") or "Unknown"
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        phase = "Terminating"
    return [
        f"{ready}/{len(containers)}",
        phase,
        restarts,
        _created(body, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


_BUILTIN_COLUMNS: dict[tuple[str, str], tuple[list[ColumnDefinition], Cells]] = {
    ("", "pods"): (
        [
            _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            _column("Status", "The aggregate status of the containers in this pod."),
            _column(
                "Restarts", "The number of times the containers have restarted.", kind="string"
            ),
            _age_column(),
            _column("IP", "The IP address assigned to the pod.", priority=1),
            _column("Node", "The node the pod is assigned to.", priority=1),
            _column("Nominated Node", "The node the pod is nominated to.", priority=1),
            _column("Readiness Gates", "The pod's readiness gates.", priority=1),
        ],
        _pod_cells,
    ),
    ("", "configmaps"): (
        [_column("Data", "The number of keys.", kind="integer"), _age_column()],
        lambda b, now: [
            len(b.get("data") or {}) + len(b.get("binaryData") or {}),
            _created(b, now),
        ],
    ),
    ("", "secrets"): (
        [
            _column("Type", "The type of the secret."),
            _column("Data", "The number of keys.", kind="integer"),
            _age_column(),
        ],
        lambda b, now: [b.get("type") or "Opaque", len(b.get("data") or {}), _created(b, now)],
    ),
    ("", "namespaces"): (
        [_column("Status", "The status of the namespace."), _age_column()],
        lambda b, now: [(b.get("status") or {}).get("phase") or "Active", _created(b, now)],
    ),
    ("coordination.k8s.io", "leases"): (
        [_column("Holder", "The holder of the lease."), _age_column()],
        lambda b, now: [(b.get("spec") or {}).get("holderIdentity") or "", _created(b, now)],
    ),
}


def _columns(spec: resources.ResourceSpec) -> tuple[list[ColumnDefinition], Cells]:
    if spec.storage_key in _BUILTIN_COLUMNS:
        return _BUILTIN_COLUMNS[spec.storage_key]
    if spec.printer_columns:
        printer = list(spec.printer_columns)
        definitions = [
            _column(
                str(c.get("name")),
                str(c.get("description") or ""),
                kind=str(c.get("type") or "string"),
                priority=int(c.get("priority") or 0),
            )
            for c in printer
        ]

        def cells(body: Mapping[str, Any], now: datetime.datetime) -> list[Any]:
            return [
                _cell(evaluate_path(body, str(c.get("jsonPath") or "")), str(c.get("type")), now)
                for c in printer
            ]

        return definitions, cells
    return [_age_column()], lambda b, now: [_created(b, now)]


def _row_object(body: Mapping[str, Any], include: str) -> dict[str, Any]:
    if include == "Object":
        return dict(body)
    if include == "None":
        return {}
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(body.get("metadata") or {}),
    }


def render(
    spec: resources.ResourceSpec,
    bodies: Iterable[Mapping[str, Any]],
    *,
    now: datetime.datetime,
    resource_version: str,
    include_object: str = "Metadata",
    continue_token: str = "",
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of the objects: NAME, then the kind's columns."""
    definitions, cells = _columns(spec)
    rows: list[TableRow] = [
        {
            "cells": [(body.get("metadata") or {}).get("name"), *cells(body, now)],
            "object": _row_object(body, include_object),
        }
        for body in bodies
    ]
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    columns: Sequence[ColumnDefinition] = [_NAME, *definitions]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": list(columns),
        "rows": rows,
    }
