"""Who may reach the operator's and the consumers' metrics, as the installs render them.

The operator serves /metrics over HTTPS to tokens allowed `get` on it; the ServiceMonitor
scrapes it so (https, Prometheus' ServiceAccount token). NetworkPolicies, in the chart of each
and in the plain manifests, let traffic in only on the metrics port of the pods they mean, and
by default only from the Prometheus Operator's Prometheus pods. The live check of the same
(TokenReview, SubjectAccessReview on a real API server) is tests/install/wire/
test_metrics_access.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.install import test_consumer_chart as consumer_chart
from tests.support import charts, loading

PROMETHEUS = [
    {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
]


def of_kind(bodies: Any, kind: str) -> list[dict[str, Any]]:
    return [b for b in bodies if b.get("kind") == kind]


def operator_chart(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    rendered = charts.render(
        loading.CHART_DIR, values, name=loading.RELEASE, namespace=loading.RELEASE_NAMESPACE
    )
    return list(charts.documents(rendered))


def pod_labels_and_ports(deployment: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    return template["metadata"]["labels"], {p["name"] for p in container["ports"]}


def admits_only_the_metrics_port(policy: dict[str, Any], deployment: dict[str, Any]) -> None:
    labels, ports = pod_labels_and_ports(deployment)
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= labels.items(), "the policy selects other pods"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == sorted(ports)
    assert rule["from"] == PROMETHEUS


def test_the_operator_chart_serves_metrics_over_https_to_prometheus_only() -> None:
    docs = operator_chart({"serviceMonitor": {"enabled": True}})
    (deployment,) = of_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--metrics-insecure" not in container["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    (policy,) = of_kind(docs, "NetworkPolicy")
    admits_only_the_metrics_port(policy, deployment)
    (service,) = of_kind(docs, "Service")
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    reader = next(
        d for d in of_kind(docs, "ClusterRole") if d["metadata"]["name"].endswith("-metrics-reader")
    )
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [
        b
        for b in of_kind(docs, "ClusterRoleBinding")
        if b["roleRef"]["name"] == reader["metadata"]["name"]
    ]


def test_the_operator_chart_takes_a_certificate_and_binds_more_readers() -> None:
    readers = [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    docs = operator_chart({"metrics": {"certSecret": "ehb-metrics-tls", "readers": readers}})
    (deployment,) = of_kind(docs, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert "--metrics-cert-dir=/etc/eventhub-balancer/metrics-tls" in container["args"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["metrics-tls"]["secret"]["secretName"] == "ehb-metrics-tls"
    (binding,) = [
        b
        for b in of_kind(docs, "ClusterRoleBinding")
        if b["roleRef"]["name"].endswith("-metrics-reader")
    ]
    assert binding["subjects"] == readers


def test_the_network_policies_can_be_left_out_or_opened_to_others() -> None:
    assert not of_kind(operator_chart({"networkPolicy": {"enabled": False}}), "NetworkPolicy")
    others = [{"namespaceSelector": {"matchLabels": {"team": "observability"}}}]
    (policy,) = of_kind(operator_chart({"networkPolicy": {"metricsFrom": others}}), "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == others


def test_the_plain_install_ships_the_same_policy() -> None:
    docs = [d.body for d in loading.file_documents(loading.MANIFESTS_DIR / "install")]
    (deployment,) = of_kind(docs, "Deployment")
    (policy,) = of_kind(docs, "NetworkPolicy")
    admits_only_the_metrics_port(policy, deployment)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--metrics-port=8443" in container["args"]
    (service,) = of_kind(docs, "Service")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["https"]


@pytest.mark.parametrize("values_file", consumer_chart.VALUES_FILES, ids=consumer_chart.label)
def test_the_consumer_chart_admits_prometheus_on_the_metrics_port_only(
    values_file: Path | None,
) -> None:
    docs = consumer_chart.render(consumer_chart.with_required(values_file), required=False)
    (policy,) = docs["NetworkPolicy"]
    (deployment,) = docs["Deployment"]
    admits_only_the_metrics_port(policy, deployment)
    if docs.get("PodMonitor"):
        (monitor,) = docs["PodMonitor"]
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] == policy["spec"]["ingress"][0]["ports"][0]["port"]
