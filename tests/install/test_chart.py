"""The Helm chart, rendered and linted by the `helm` binary (`make install` builds it): lint
clean, values checked by values.schema.json, each mode renders what it promises, names fit in
63 characters, and its crds/ equals the repository's crds/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer_devstack.commands import chart as chart_command
from tests.support import charts, loading

VALUES_FILES = [None, *loading.CI_VALUES]


def label(values_file: Path | None) -> str:
    return values_file.name if values_file else "defaults"


def by_kind(docs: tuple[loading.Document, ...], kind: str) -> list[dict[str, Any]]:
    return [d.body for d in docs if d.kind == kind]


#: The labels by which Kubernetes' built-in view, edit and admin roles gather ClusterRoles.
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"


def aggregated(body: dict[str, Any]) -> bool:
    """Whether a ClusterRole is one the built-in roles gather (for users, not the operator)."""
    labels = body["metadata"].get("labels") or {}
    return any(key.startswith(AGGREGATE_TO) for key in labels)


def operator_cluster_roles(docs: tuple[loading.Document, ...]) -> list[dict[str, Any]]:
    """The operator's own ClusterRole (not the users' aggregated ones, nor the tenant and
    metrics-reader roles that are bound elsewhere)."""
    return [
        d
        for d in by_kind(docs, "ClusterRole")
        if not aggregated(d) and not d["metadata"]["name"].endswith(("-tenant", "-metrics-reader"))
    ]


def operator_args(docs: tuple[loading.Document, ...]) -> list[str]:
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=label)
def test_helm_lint_is_clean(values_file: Path | None) -> None:
    report = charts.lint(
        loading.CHART_DIR, loading.load_values(values_file), namespace=loading.RELEASE_NAMESPACE
    )
    # Only INFO is left ("icon is recommended"); --strict fails on any warning.
    assert report.problems == ()
    assert report.passed


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"watchNamespaces": ["Shop_Orders"]}, "/watchNamespaces/0"),
        ({"imagePullPolicy": "Always"}, "imagePullPolicy"),
        ({"image": {"repository": "x", "digest": "latest"}}, "/image/digest"),
        ({"logVerbosity": 5}, "/logVerbosity"),
        ({"logFormat": "yaml"}, "/logFormat"),
        ({"podDisruptionBudget": {"maxUnavailable": "ten"}}, "/podDisruptionBudget/maxUnavailable"),
        ({"resources": {"limits": {"memory": "512MB"}}}, "/resources/limits/memory"),
        ({"resources": {"requests": {"cpu": -1}}}, "/resources/requests/cpu"),
        ({"resources": {"limit": {"memory": "512Mi"}}}, "'limit' not allowed"),
    ],
)
def test_the_values_schema_rejects_mistakes(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(charts.HelmError, match="don't meet the specifications") as e:
        charts.render(
            loading.CHART_DIR, values, name=loading.RELEASE, namespace=loading.RELEASE_NAMESPACE
        )
    assert complaint in str(e.value)


def test_more_replicas_without_peering_say_both_ways_out() -> None:
    """The template, not the schema, refuses it: the schema could only say "value must be true"
    at /peering/enabled, which named neither the reason nor the CRDs peering needs."""
    with pytest.raises(charts.HelmError) as e:
        charts.render(
            loading.CHART_DIR,
            {"replicaCount": 2},
            name=loading.RELEASE,
            namespace=loading.RELEASE_NAMESPACE,
        )
    assert "don't meet the specifications" not in str(e.value)
    assert (
        "replicaCount: 2 operators need peering.enabled=true, or each would act on every "
        "consumer alone; set replicaCount=1, or apply manifests/peering/kopf-peering-crds.yaml "
        "once and set peering.enabled=true"
    ) in str(e.value)
    charts.render(
        loading.CHART_DIR,
        {"replicaCount": 2, "peering": {"enabled": True}},
        name=loading.RELEASE,
        namespace=loading.RELEASE_NAMESPACE,
    )


def undocumented_values(text: str) -> list[str]:
    """The values (keys with a value on their line) with no comment above them or any parent."""
    undocumented = []
    documented_at: list[tuple[int, bool]] = []  # (indent, documented) of open parents
    previous = ""
    for number, line in enumerate(text.splitlines()):
        match = re.match(r"^(\s*)([A-Za-z0-9_.-]+):\s*(\S?)", line)
        if match:
            indent = len(match.group(1))
            while documented_at and documented_at[-1][0] >= indent:
                documented_at.pop()
            here = previous.lstrip().startswith("#")
            leaf = match.group(3) not in ("", "#")
            if leaf and not here and not any(d for _, d in documented_at):
                undocumented.append(f"line {number + 1}: {match.group(2)}")
            documented_at.append((indent, here))
        if line.strip():
            previous = line
    return undocumented


def test_every_value_is_commented() -> None:
    assert undocumented_values((loading.CHART_DIR / "values.yaml").read_text()) == []


def test_an_uncommented_value_is_found() -> None:
    text = "# -- documented\na: 1\nparent:\n  # -- child\n  b: 2\n  c: 3\n# -- ctx\nd:\n  e: 4\n"
    assert undocumented_values(text) == ["line 6: c"]


def test_the_schema_covers_every_top_level_value() -> None:
    schema = charts.chart_schema(loading.CHART_DIR)
    values = charts.chart_values(loading.CHART_DIR)
    assert set(values) <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_chart_crds_equal_the_repository_crds() -> None:
    found = chart_command.drift(loading.ROOT)
    assert not found, f"run `ehb chart sync-crds`: {found.describe()}"
    names = set(
        charts.chart_crds(
            loading.CHART_DIR, name=loading.RELEASE, namespace=loading.RELEASE_NAMESPACE
        )
    )
    assert names == {p.name for p in loading.CRDS_DIR.glob("*.yaml")}


def test_default_install_is_cluster_wide_and_standalone() -> None:
    docs = loading.rendered(None)
    args = operator_args(docs)
    assert args[args.index("operator") :] == [
        "operator",
        "--all-namespaces",
        "--standalone",
        "--metrics-port=8443",
        "--allowed-eventhub-suffix=.servicebus.windows.net",
        "--allowed-blob-suffix=.blob.core.windows.net",
    ]
    assert by_kind(docs, "Role") == []
    (cluster_role,) = operator_cluster_roles(docs)
    resources = {r for rule in cluster_role["rules"] for r in rule["resources"]}
    assert "namespaces" not in resources  # kopf lists namespaces only for glob patterns
    assert "eventhubconsumers" in resources
    # No Secret and no token anywhere until a namespace opts in (tenantNamespaces).
    assert not {"secrets", "serviceaccounts", "serviceaccounts/token"} & resources
    assert by_kind(docs, "RoleBinding") == []
    assert not by_kind(docs, "ClusterKopfPeering") + by_kind(docs, "KopfPeering")
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_namespaced_install_grants_only_in_the_watched_namespaces() -> None:
    docs = loading.rendered(loading.CHART_DIR / "ci" / "namespaced-values.yaml")
    args = operator_args(docs)
    assert "--all-namespaces" not in args
    assert {a for a in args if a.startswith("--namespace=")} == {
        "--namespace=shop",
        "--namespace=billing",
    }
    roles = by_kind(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["billing", "shop"]
    bindings = by_kind(docs, "RoleBinding")
    # The Role, and the tenant ClusterRole (Secrets, tokens): the watched namespaces opted in.
    assert sorted((b["metadata"]["namespace"], b["roleRef"]["kind"]) for b in bindings) == [
        ("billing", "ClusterRole"),
        ("billing", "Role"),
        ("shop", "ClusterRole"),
        ("shop", "Role"),
    ]
    # Cluster-wide, only what kopf needs to discover its resources and the metrics' reviews.
    (cluster_role,) = operator_cluster_roles(docs)
    assert [(r["resources"], r["verbs"]) for r in cluster_role["rules"]] == [
        (["customresourcedefinitions"], ["list", "watch"]),
        (["tokenreviews"], ["create"]),
        (["subjectaccessreviews"], ["create"]),
    ]


@pytest.mark.parametrize(
    ("values_name", "kind", "namespaces"),
    [
        ("peering-values.yaml", "ClusterKopfPeering", [None]),
        ("namespaced-peering-values.yaml", "KopfPeering", ["billing", "shop"]),
    ],
)
def test_peering_runs_replicas_with_a_peering_object(
    values_name: str, kind: str, namespaces: list[str | None]
) -> None:
    docs = loading.rendered(loading.CHART_DIR / "ci" / values_name)
    peerings = by_kind(docs, kind)
    assert sorted((p["metadata"].get("namespace") for p in peerings), key=str) == namespaces
    names = {p["metadata"]["name"] for p in peerings}
    assert len(names) == 1
    args = operator_args(docs)
    assert f"--peering={names.pop()}" in args
    assert "--standalone" not in args
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    plural = kind.lower() + "s"
    granted = {
        r
        for role in operator_cluster_roles(docs) + by_kind(docs, "Role")
        for rule in role["rules"]
        for r in rule["resources"]
    }
    assert plural in granted


def test_servicemonitor_selects_the_metrics_service() -> None:
    docs = loading.rendered(loading.CHART_DIR / "ci" / "servicemonitor-values.yaml")
    (monitor,) = by_kind(docs, "ServiceMonitor")
    (service,) = by_kind(docs, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_long_release_names_are_cut_to_63_characters() -> None:
    rendered = charts.render(
        loading.CHART_DIR,
        {"serviceMonitor": {"enabled": True}},
        name="a-release-name-that-is-exactly-fifty-three-chars-long",
        namespace=loading.RELEASE_NAMESPACE,
    )
    docs = charts.documents(rendered)
    names = [d["metadata"]["name"] for d in docs if d]
    assert names
    assert all(len(n) <= 63 for n in names), names
    labels = [v for d in docs if d for v in d["metadata"]["labels"].values()]
    assert all(len(v) <= 63 for v in labels)


def test_the_aggregated_roles_give_users_the_resource_and_never_its_status() -> None:
    docs = loading.rendered(None)
    roles = {d["metadata"]["name"]: d for d in by_kind(docs, "ClusterRole") if aggregated(d)}
    view, edit = roles["ehb-eventhub-balancer-view"], roles["ehb-eventhub-balancer-edit"]
    # view is gathered into edit and admin too (as Kubernetes' own view rules are).
    assert {k for k, v in view["metadata"]["labels"].items() if k.startswith(AGGREGATE_TO)} == {
        f"{AGGREGATE_TO}view",
        f"{AGGREGATE_TO}edit",
        f"{AGGREGATE_TO}admin",
    }
    assert {k for k, v in edit["metadata"]["labels"].items() if k.startswith(AGGREGATE_TO)} == {
        f"{AGGREGATE_TO}edit",
        f"{AGGREGATE_TO}admin",
    }
    for role in (view, edit):
        assert [r["resources"] for r in role["rules"]] == [["eventhubconsumers"]]
    assert set(view["rules"][0]["verbs"]) == {"get", "list", "watch"}
    assert "get" not in edit["rules"][0]["verbs"]
    assert {"create", "patch", "delete"} <= set(edit["rules"][0]["verbs"])
    # Nobody's ClusterRoleBinding names them: Kubernetes folds them into its own roles.
    bound = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
    assert not bound & set(roles)


def test_the_aggregated_roles_are_a_value_and_match_the_plain_manifests() -> None:
    off = charts.render(
        loading.CHART_DIR,
        {"rbac": {"aggregatedRoles": False}},
        name=loading.RELEASE,
        namespace=loading.RELEASE_NAMESPACE,
    )
    assert not [d for d in charts.documents(off) if d["kind"] == "ClusterRole" and aggregated(d)]
    plain = [
        d.body
        for d in loading.file_documents(loading.MANIFESTS_DIR / "install")
        if d.kind == "ClusterRole" and aggregated(d.body)
    ]
    chart = [d for d in by_kind(loading.rendered(None), "ClusterRole") if aggregated(d)]

    def essence(roles: list[dict[str, Any]]) -> list[tuple[object, ...]]:
        return sorted(
            (
                r["metadata"]["name"].rsplit("-", 1)[1],
                sorted(k for k in r["metadata"]["labels"] if k.startswith(AGGREGATE_TO)),
                r["rules"],
            )
            for r in roles
        )

    assert essence(plain) == essence(chart)


def test_the_readme_names_every_value() -> None:
    """The chart's README keeps in step with values.yaml: each top-level value is in its table."""
    readme = (loading.CHART_DIR / "README.md").read_text()
    missing = [k for k in charts.chart_values(loading.CHART_DIR) if f"`{k}`" not in readme]
    assert missing == []


def documented_helm_commands(page: Path) -> list[list[str]]:
    """The `.venv/bin/helm ...` commands of a page's sh blocks, continuation lines joined."""
    import shlex

    commands = []
    for block in re.findall(r"```sh\n(.*?)```", page.read_text(), flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith(".venv/bin/helm "):
                commands.append(shlex.split(line))
    return commands


def test_the_docs_render_the_charts_without_a_cluster() -> None:
    """docs/install.md's `helm template` commands, run as written from the repository."""
    commands = documented_helm_commands(loading.ROOT / "docs" / "install.md")
    assert len(commands) == 2
    kinds = []
    for command in commands:
        assert command[1] == "template"
        rendered = charts.helm(*command[1:], cwd=loading.ROOT)
        kinds.append({d["kind"] for d in charts.documents(charts.split_sources(rendered))})
    operator, consumer = kinds
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole"} <= operator
    assert "ValidatingAdmissionPolicy" not in operator  # --kube-version 1.29.0
    assert {"EventHubConsumer", "Deployment"} <= consumer
