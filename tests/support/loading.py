"""The YAML documents the install consists of: crds/, manifests/ and the rendered chart."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from eventhub_balancer_devstack.kube import resources
from tests.support import paths

ROOT = paths.REPOSITORY
CRDS_DIR = ROOT / "crds"
MANIFESTS_DIR = ROOT / "manifests"
CHART_DIR = ROOT / "charts" / "eventhub-balancer"
CI_VALUES = sorted((CHART_DIR / "ci").glob("*-values.yaml"))

#: The release the chart is rendered as in tests.
RELEASE = "ehb"
RELEASE_NAMESPACE = "eventhub-balancer-system"


@dataclasses.dataclass(frozen=True)
class Document:
    """One YAML document and where it came from (file and index), for messages."""

    source: str
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))

    def __str__(self) -> str:
        return f"{self.source}: {self.kind} {self.name}"


def _documents_of(text: str, source: str) -> list[Document]:
    # libyaml's parser: the chart's renderings are read as each test module is collected.
    return [
        Document(f"{source}#{i}", body)
        for i, body in enumerate(yaml.load_all(text, Loader=resources.YAML_LOADER))
        if body is not None
    ]


def yaml_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml"))


def file_documents(*directories: Path) -> list[Document]:
    docs = []
    for directory in directories:
        for path in yaml_files(directory):
            docs.extend(_documents_of(path.read_text(), str(path.relative_to(ROOT))))
    return docs


def load_values(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    loaded: dict[str, Any] = yaml.load(path.read_text(), Loader=resources.YAML_LOADER) or {}
    return loaded


@functools.cache
def rendered(values_file: Path | None) -> tuple[Document, ...]:
    """The chart as `helm template --include-crds` renders it, with its defaults or one ci/
    values file."""
    from tests.support import charts

    label = values_file.name if values_file else "defaults"
    manifests = charts.render(
        CHART_DIR,
        load_values(values_file),
        name=RELEASE,
        namespace=RELEASE_NAMESPACE,
        include_crds=True,
    )
    docs: list[Document] = []
    for template, text in sorted(manifests.items(), key=lambda kv: not kv[0].startswith("crds/")):
        docs.extend(_documents_of(text, f"chart[{label}]/{template}"))
    return tuple(docs)


def all_documents() -> Iterator[Document]:
    yield from file_documents(CRDS_DIR, MANIFESTS_DIR)
    for values_file in [None, *CI_VALUES]:
        yield from rendered(values_file)
