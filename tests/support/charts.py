"""The charts as Helm itself lints, renders and installs them: the `helm` binary that `make
install` builds from its pinned module (devstack/tools/helm) into the venv's bin.

Every call is one `helm` process, with the values on its stdin (JSON is YAML): what a test
checks is what a user's `helm template` or `helm install` does with the same values.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

#: `make install` (its go-tools step) puts the pinned helm here, beside the venv's python.
HELM = Path(sys.executable).parent / "helm"
#: A helm call that takes longer is stuck: rendering takes well under a second, an install
#: against a local API a few seconds.
TIMEOUT_SECONDS = 120
#: Where `helm template` starts each rendered document: "# Source: CHART/templates/x.yaml".
SOURCE = re.compile(r"^# Source: (?P<path>\S+)\n", re.MULTILINE)


class HelmError(Exception):
    """helm exited non-zero: its message (a values schema violation, a template's `fail`)."""


def run(
    *args: str,
    values: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run helm with ``args`` (and ``values`` on stdin as ``-f -``), whatever its exit code."""
    if not HELM.exists():
        raise FileNotFoundError(f"{HELM} is missing: run `make install` (it builds helm)")
    command = [str(HELM), *args]
    if values is not None:
        command += ["-f", "-"]
    return subprocess.run(
        command,
        input=json.dumps(values) if values is not None else None,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        check=False,
    )


def helm(
    *args: str,
    values: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """Run helm; its stdout, or `HelmError` with its message when it fails."""
    done = run(*args, values=values, env=env, cwd=cwd)
    if done.returncode != 0:
        raise HelmError(done.stderr.strip() or done.stdout.strip())
    return done.stdout


def render(
    chart_dir: Path,
    values: Mapping[str, Any] | None = None,
    *,
    name: str,
    namespace: str,
    kube_version: str | None = None,
    api_versions: Sequence[str] = (),
    include_crds: bool = False,
) -> dict[str, str]:
    """``helm template``: each rendered template's path in the chart ("templates/x.yaml") ->
    its documents, as one YAML stream."""
    args = ["template", name, str(chart_dir), "--namespace", namespace]
    if kube_version is not None:
        args += ["--kube-version", kube_version]
    for api in api_versions:
        args += ["--api-versions", api]
    if include_crds:
        args.append("--include-crds")
    return split_sources(helm(*args, values=values))


def split_sources(stream: str) -> dict[str, str]:
    """`helm template`'s output by source template (the path after the chart's name)."""
    found: dict[str, list[str]] = {}
    matches = list(SOURCE.finditer(stream))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(stream)
        text = stream[match.end() : end].removesuffix("---\n")
        path = match.group("path").split("/", 1)[1]
        found.setdefault(path, []).append(text)
    return {path: "---\n".join(texts) for path, texts in found.items()}


def documents(rendered: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every non-empty YAML document of a rendering, in template order."""
    return [
        body
        for _path, text in sorted(rendered.items())
        for body in yaml.safe_load_all(text)
        if body
    ]


def notes(
    chart_dir: Path,
    values: Mapping[str, Any] | None = None,
    *,
    name: str,
    namespace: str,
    kube_version: str,
    scratch: Path,
) -> str:
    """NOTES.txt as `helm install` would print it on a cluster of ``kube_version``.

    `helm template` never prints the notes and `helm install` takes no --kube-version, so a
    copy of the chart in ``scratch`` carries one more template that renders NOTES.txt with
    `tpl`: the same text, helpers and capabilities.
    """
    import shutil

    copy = scratch / chart_dir.name
    shutil.copytree(chart_dir, copy)
    (copy / "files").mkdir(exist_ok=True)
    shutil.copy(copy / "templates" / "NOTES.txt", copy / "files" / "notes-under-test.txt")
    (copy / "templates" / "notes-under-test.yaml").write_text(
        'notes: {{ tpl (.Files.Get "files/notes-under-test.txt") . | quote }}\n'
    )
    rendered = render(copy, values, name=name, namespace=namespace, kube_version=kube_version)
    shown: str = yaml.safe_load(rendered["templates/notes-under-test.yaml"])["notes"]
    return shown


@dataclasses.dataclass(frozen=True)
class Lint:
    """What `helm lint --strict` said: its findings below INFO (warnings and errors), and the
    `required` values it found missing (lint reports those as INFO and passes, by design: a
    chart repository lints charts without their users' values)."""

    passed: bool
    problems: tuple[str, ...]
    missing: tuple[str, ...]


def lint(
    chart_dir: Path,
    values: Mapping[str, Any] | None = None,
    *,
    namespace: str,
    kube_version: str | None = None,
) -> Lint:
    """``helm lint --strict``: warnings fail it as errors do."""
    args = ["lint", "--strict", str(chart_dir), "--namespace", namespace]
    if kube_version is not None:
        args += ["--kube-version", kube_version]
    done = run(*args, values=values)
    lines = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines()]
    problems = tuple(line for line in lines if line.startswith(("[WARNING]", "[ERROR]")))
    missing = tuple(
        line.split("Missing required value: ", 1)[1]
        for line in lines
        if "Missing required value: " in line
    )
    return Lint(passed=done.returncode == 0, problems=problems, missing=missing)


def chart_values(chart_dir: Path) -> dict[str, Any]:
    """The chart's default values (values.yaml)."""
    loaded: dict[str, Any] = yaml.safe_load((chart_dir / "values.yaml").read_text())
    return loaded


def chart_schema(chart_dir: Path) -> dict[str, Any]:
    """The chart's values.schema.json."""
    loaded: dict[str, Any] = json.loads((chart_dir / "values.schema.json").read_text())
    return loaded


def chart_crds(chart_dir: Path, *, name: str, namespace: str) -> dict[str, str]:
    """The CRDs Helm installs from the chart's crds/: file name -> text."""
    rendered = render(chart_dir, name=name, namespace=namespace, include_crds=True)
    return {
        path.removeprefix("crds/"): text
        for path, text in rendered.items()
        if path.startswith("crds/")
    }
