"""Table responses: the columns kubectl prints, computed by the server."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from eventhub_balancer_devstack.kube import resources, tables

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600 + 60, "3h1m"),
     (30 * 3600, "30h"), (50 * 3600, "2d2h"), (400 * 86400, "400d"), (3 * 365 * 86400, "3y")],
)  # fmt: skip
def test_ages_read_as_kubectl_prints_them(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_json_paths_of_printer_columns() -> None:
    body = {"status": {"partitionCount": 4, "conditions": [
        {"type": "Balanced", "status": "False"}, {"type": "Ready", "status": "True"}]}}  # fmt: skip
    assert tables.evaluate_path(body, ".status.partitionCount") == [4]
    assert tables.evaluate_path(body, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert tables.evaluate_path(body, ".status.conditions[*].type") == ["Balanced", "Ready"]
    assert tables.evaluate_path(body, ".status.conditions[0].status") == ["False"]
    assert tables.evaluate_path(body, ".status.memberCount") == []


def test_accept_headers_that_ask_for_tables() -> None:
    assert tables.wants_table(
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
        "g=meta.k8s.io,application/json"
    )
    assert not tables.wants_table("application/json")


def test_a_custom_resource_s_printer_columns() -> None:
    spec = resources.ResourceSpec(
        group="g.dev", version="v1", plural="things", kind="Thing", singular="thing",
        namespaced=True, printer_columns=(
            {"name": "Count", "type": "integer", "jsonPath": ".status.count"},
            {"name": "Ready", "type": "string",
             "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ),
    )  # fmt: skip
    body: dict[str, Any] = {
        "metadata": {"name": "a", "creationTimestamp": "2026-01-01T11:58:00Z"},
        "status": {"count": 3, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    table = tables.render(spec, [body, {"metadata": {"name": "b"}}], now=NOW, resource_version="7")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Count", "Ready", "Age"]
    assert [r["cells"] for r in table["rows"]] == [["a", 3, "True", "2m"], ["b", None, None, None]]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_built_in_kinds_have_their_usual_columns() -> None:
    pods = next(r for r in resources.BUILTINS if r.plural == "pods")
    pod = {"metadata": {"name": "p", "creationTimestamp": "2026-01-01T11:59:00Z"},
           "spec": {"containers": [{"name": "c"}]},
           "status": {"phase": "Running",
                      "containerStatuses": [{"ready": True, "restartCount": 2}]}}  # fmt: skip
    table = tables.render(pods, [pod], now=NOW, resource_version="1")
    names = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:5] == ["p", "1/1", "Running", 2, "60s"]
    configmaps = next(r for r in resources.BUILTINS if r.plural == "configmaps")
    cm = {"metadata": {"name": "c", "creationTimestamp": "2026-01-01T12:00:00Z"},
          "data": {"a": "1", "b": "2"}}  # fmt: skip
    table = tables.render(configmaps, [cm], now=NOW, resource_version="1")
    assert table["rows"][0]["cells"] == ["c", 2, "0s"]
