"""The chart's tenancy values reach the operator's flags: the namespaces lent its identity
(none by default) and the hosts bound to one namespace each."""

from __future__ import annotations

from pathlib import Path

from tests.support import loading


def operator_args(values_file: Path | None) -> list[str]:
    docs = loading.rendered(values_file)
    (deployment,) = [d.body for d in docs if d.kind == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args


def test_by_default_no_namespace_is_lent_the_identity_and_nothing_is_bound() -> None:
    args = operator_args(None)
    assert not [a for a in args if a.startswith(("--identity-namespace", "--bind-location"))]


def test_the_tenancy_values_become_flags() -> None:
    path = loading.CHART_DIR / "ci" / "tenancy-values.yaml"
    assert path in loading.CI_VALUES
    args = operator_args(path)
    assert [a for a in args if a.startswith(("--identity-namespace", "--bind-location"))] == [
        "--identity-namespace=shop",
        "--identity-namespace=team-*",
        "--bind-location=shop=shopcheckpoints.blob.core.windows.net",
        "--bind-location=payments=payments.servicebus.windows.net",
    ]
