"""docs/reference/eventhubconsumer.md is the CRD's rendering, field for field."""

from __future__ import annotations

import yaml

from tests.install import referencepages


def test_the_reference_page_is_the_crds_rendering() -> None:
    page = referencepages.PAGE_PATH.read_text()
    assert page == referencepages.rendered_page(), (
        "docs/reference/eventhubconsumer.md is out of date: run "
        "`.venv/bin/python -m tests.install.referencepages`"
    )


def test_every_spec_field_of_the_crd_has_a_row() -> None:
    crd = yaml.safe_load(referencepages.CRD_PATH.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    page = referencepages.PAGE_PATH.read_text()

    def fields(node: dict[str, object], path: str) -> list[str]:
        found = [path]
        properties = node.get("properties")
        items = node.get("items")
        if isinstance(items, dict):
            properties, path = items.get("properties"), f"{path}[]"
        for name, child in (properties or {}).items() if isinstance(properties, dict) else []:
            found += fields(child, f"{path}.{name}")
        return found

    for part in ("spec", "status"):
        for path in fields(schema["properties"][part], part)[1:]:
            assert f"| `{path}`" in page, path


def test_a_changed_description_changes_the_page() -> None:
    crd = yaml.safe_load(referencepages.CRD_PATH.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["paused"]["description"] = "Something else."
    assert referencepages.render(crd) != referencepages.rendered_page()
