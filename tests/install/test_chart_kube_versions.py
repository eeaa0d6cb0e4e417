"""The chart installs on every Kubernetes minor its Chart.yaml ``kubeVersion`` admits.

Each minor from the declared floor to the newest schema kubernetes-validate ships is rendered
by ``helm template --kube-version 1.N.0`` (the `helm` binary `make install` builds), with every
ci/ values file, and each built-in document is validated strictly against
that minor's API schemas. The admission policy (admissionregistration.k8s.io/v1, 1.30+) is
rendered exactly where that API exists, so a 1.27-1.29 install never fails on it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import charts, kubeschemas, loading

#: The first minor whose admissionregistration.k8s.io/v1 serves ValidatingAdmissionPolicy.
POLICY_MINOR = 30
POLICY_KINDS = frozenset({"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})
#: Kinds without an offline schema (the Prometheus Operator's, KEDA's): checked elsewhere.
THIRD_PARTY_GROUPS = frozenset({"monitoring.coreos.com", "keda.sh"})


def declared_floor(chart_dir: Path = loading.CHART_DIR) -> tuple[int, int]:
    """The lowest (major, minor) of Chart.yaml's kubeVersion (">=1.27.0-0")."""
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    match = re.fullmatch(r">=\s*(\d+)\.(\d+)(?:\.\d+)?(?:-0)?", chart["kubeVersion"])
    assert match, f"kubeVersion {chart['kubeVersion']!r} is not a >= floor this test reads"
    return int(match.group(1)), int(match.group(2))


def supported_minors() -> list[int]:
    major, floor = declared_floor()
    assert major == 1
    newest = int(kubernetes_validate.utils.latest_version().split(".")[1])
    return list(range(floor, newest + 1))


MINORS = supported_minors()
VALUES_FILES = [None, *loading.CI_VALUES]


def render(
    values_file: Path | None,
    *,
    kube_version: str,
    api_versions: tuple[str, ...] = (),
    chart_dir: Path = loading.CHART_DIR,
) -> list[dict[str, Any]]:
    """The chart's templates as ``helm template --kube-version`` renders them."""
    rendered = charts.render(
        chart_dir,
        loading.load_values(values_file),
        name=loading.RELEASE,
        namespace=loading.RELEASE_NAMESPACE,
        kube_version=kube_version,
        api_versions=api_versions,
    )
    return charts.documents(rendered)


def notes(*, kube_version: str, scratch: Path) -> str:
    """NOTES.txt as `helm install` prints it on a cluster of ``kube_version``."""
    return charts.notes(
        loading.CHART_DIR,
        name=loading.RELEASE,
        namespace=loading.RELEASE_NAMESPACE,
        kube_version=kube_version,
        scratch=scratch,
    )


def test_the_release_notes_say_when_the_policies_were_left_out(tmp_path: Path) -> None:
    assert "are not installed" in notes(kube_version="1.29.0", scratch=tmp_path / "old")
    assert "are not installed" not in notes(kube_version="1.30.0", scratch=tmp_path / "new")


def kinds(docs: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


def test_the_supported_range_is_what_the_issue_promises() -> None:
    assert MINORS[0] == 27
    assert {28, 34} <= set(MINORS)


def test_the_kube_version_reaches_the_templates() -> None:
    notes_free = render(None, kube_version="1.28.0")
    assert not kinds(notes_free) & POLICY_KINDS
    assert kinds(render(None, kube_version="1.34.0")) >= POLICY_KINDS


def test_a_cluster_that_serves_the_policy_api_gets_the_policy() -> None:
    """`helm install` sees the cluster's API list: the API itself decides, not the number."""
    served = ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",)
    assert kinds(render(None, kube_version="1.29.5", api_versions=served)) >= POLICY_KINDS


def test_the_policy_can_still_be_turned_off_on_a_new_cluster(tmp_path: Path) -> None:
    values = tmp_path / "off-values.yaml"
    values.write_text("admissionPolicy:\n  enabled: false\n")
    assert not kinds(render(values, kube_version="1.34.0")) & POLICY_KINDS


@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_helm_lint_is_clean_for_every_supported_minor(minor: int) -> None:
    report = charts.lint(
        loading.CHART_DIR, namespace=loading.RELEASE_NAMESPACE, kube_version=f"v1.{minor}.0"
    )
    assert report.problems == ()
    assert report.passed


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=lambda v: v.name if v else "defaults")
@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_every_rendering_validates_against_its_minor(minor: int, values_file: Path | None) -> None:
    version = f"1.{minor}.0"
    docs = render(values_file, kube_version=version)
    has_policy = bool(kinds(docs) & POLICY_KINDS)
    assert has_policy == (minor >= POLICY_MINOR)
    for body in docs:
        group = body["apiVersion"].split("/")[0] if "/" in body["apiVersion"] else ""
        if group in THIRD_PARTY_GROUPS or group.endswith("kopf.dev"):
            continue
        try:
            kubeschemas.validate(body, version)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(map(str, e.path))
            pytest.fail(f"{body['kind']} {body['metadata']['name']} on {version}: {path}: {e}")


def test_the_operator_has_a_disruption_budget_that_never_blocks_a_drain_of_one() -> None:
    docs = render(None, kube_version="1.34.0")
    (budget,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert budget["spec"]["maxUnavailable"] == 1
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_the_log_format_is_a_value() -> None:
    docs = render(loading.CHART_DIR / "ci" / "json-logs-values.yaml", kube_version="1.34.0")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args.index("--log-format=json") < args.index("operator")
