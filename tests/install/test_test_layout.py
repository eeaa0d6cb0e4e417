"""The test tree's own rules: markers come from folders, and no test file declares them."""

from __future__ import annotations

import ast

from tests import conftest
from tests.support import paths

TESTS = paths.REPOSITORY / "tests"


def test_markers_follow_the_folders() -> None:
    assert conftest.markers_for(TESTS / "planner" / "test_x.py") == []
    assert conftest.markers_for(TESTS / "handlers" / "wire" / "test_x.py") == ["integration"]
    assert conftest.markers_for(TESTS / "spark" / "test_x.py") == ["spark"]
    assert conftest.markers_for(TESTS / "devstack" / "chaos" / "test_x.py") == [
        "chaos",
        "integration",
        "slow",
    ]


def test_no_test_file_declares_a_folder_marker() -> None:
    folder_markers = {m for ms in conftest.FOLDER_MARKERS.values() for m in ms} - {"slow"}
    offenders = []
    for path in TESTS.rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "mark"
                and node.attr in folder_markers
                and path.parent.name not in ("wire", "spark", "chaos", "e2e")
            ):
                offenders.append(f"{path.relative_to(TESTS)}: pytest.mark.{node.attr}")
    assert offenders == []


def test_wire_level_fixtures_are_used_only_under_wire_folders() -> None:
    stack_fixtures = (
        "local_kube",
        "kubeconfig",
        "kube_client",
        "kopf_operator",
        "eventhubs_emulator",
        "eventhubs_hub",
        "azurite",
        "blob_container",
        "fault_proxy",
        "proxied_container",
        "operator_stack",
    )
    offenders = []
    for path in TESTS.rglob("test_*.py"):
        parts = path.relative_to(TESTS).parts
        if any(p in ("wire", "chaos", "e2e") for p in parts) or parts[0] == "spark":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                used = {a.arg for a in node.args.args} & set(stack_fixtures)
                if used:
                    offenders.append(f"{path.relative_to(TESTS)}::{node.name} uses {used}")
    assert offenders == []
