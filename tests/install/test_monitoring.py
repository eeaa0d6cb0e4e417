"""The Grafana dashboard and the Prometheus alerts of monitoring/, and their place in the chart.

promtool (Debian's prometheus package, installed by `make install`) checks the rules and runs
their unit tests; the dashboard's queries go through the same PromQL parser as recording rules.
Every metric name they use must be one the operator or the consumer pods really export: a
renamed metric would otherwise leave a dashboard panel empty and an alert silent.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest, parser

from eventhub_balancer.adapters import deliveries
from eventhub_balancer.consumer import metrics as consumer_metrics
from eventhub_balancer.handlers import cycles, memories
from eventhub_balancer.handlers import metrics as operator_metrics
from tests.support import charts, fakes, loading

MONITORING = loading.ROOT / "monitoring"
RULES = MONITORING / "prometheus" / "rules.yaml"
RULES_TESTS = MONITORING / "prometheus" / "rules.test.yaml"
DASHBOARD = MONITORING / "grafana" / "eventhub-balancer.json"
OPERATIONS = loading.ROOT / "docs" / "operations.md"
#: The chart's copies (Helm reads files only inside the chart) and their sources.
CHART_COPIES = {
    loading.CHART_DIR / "files" / "prometheus-rules.yaml": RULES,
    loading.CHART_DIR / "files" / "grafana-dashboard.json": DASHBOARD,
}
#: Both on, for kube-prometheus-stack. Not a ci/ values file: the install-wide checks there
#: (test_validation.py) know no PrometheusRule.
MONITORING_VALUES: dict[str, Any] = {
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "monitoring": {
        "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Event Hubs"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    },
}

#: Grafana's variables, replaced by something PromQL accepts before promtool parses a query
#: (the longest first: `$__rate_interval_ms` before `$__rate_interval`).
GRAFANA_VARIABLES = {
    "$__rate_interval_ms": "300000",
    "$__rate_interval": "5m",
    "$namespace": ".*",
    "$consumer": ".*",
    "$pod": ".*",
}
METRIC_NAME = re.compile(r"\behb_[a-z0-9_]+\b")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: run `make install` (it installs Debian's prometheus)")
    return subprocess.run([found, *args], capture_output=True, text=True, timeout=120, check=False)


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_queries() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def without_grafana_variables(expr: str) -> str:
    for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda v: -len(v[0])):
        expr = expr.replace(variable, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """The ehb_* metric names a PromQL expression reads (our label names never start so)."""
    return set(METRIC_NAME.findall(expr))


def exported_names(exposition: str) -> set[str]:
    """The sample names a /metrics text can carry, also for families without samples yet."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created", ""),
    }
    names: set[str] = set()
    for family in parser.text_string_to_metric_families(exposition):
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


async def operator_exposition() -> str:
    """The operator's /metrics text after one cycle over the in-memory fakes."""
    ns, name = "shop", "orders"
    kube = fakes.FakeKube()
    kube.add_consumer(
        ns,
        name,
        {
            "eventHub": {
                "fullyQualifiedNamespace": "shop.servicebus.windows.net",
                "name": "orders",
                "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
            },
            "checkpointStore": {
                "containerName": "checkpoints",
                "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
            },
            "selector": {"matchLabels": {"app": "c"}},
        },
    )
    kube.add_secret(
        ns, "eh", {"cs": "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x"}
    )
    kube.add_secret(ns, "blob", {"cs": "UseDevelopmentStorage=true"})
    t0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
    kube.add_pod(ns, "a", labels={"app": "c"}, since=t0)
    registry = operator_metrics.Metrics()
    await cycles.run_cycle(
        kube=kube,
        hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()),
        namespace=ns,
        name=name,
        memory=memories.Memory(),
        now=t0,
        metrics=registry,
        annotate_pods=False,
    )
    text = registry.exposition().decode()
    assert 'ehb_partitions{consumer="orders",namespace="shop",pod="a"}' in text
    return text


def consumer_exposition() -> str:
    """A consumer pod's /metrics text with one owned, checkpointed partition."""
    stats = {
        "0": consumer_metrics.PartitionStats(
            events=10,
            owned=True,
            processed_sequence_number=9,
            checkpointed_sequence_number=9,
            checkpoint_time=100.0,
            last_enqueued=deliveries.LastEnqueued(
                sequence_number=12, offset="1200", enqueued_time=None, retrieved_time=None
            ),
        )
    }
    collector = consumer_metrics.RuntimeCollector(lambda: stats, now=lambda: 160.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert 'ehb_consumer_checkpoint_age_seconds{partition="0"} 60.0' in text
    return text


def test_a_pod_of_a_paused_consumer_exports_no_lag_for_the_pod_alerts_to_fire_on() -> None:
    """docs/operations.md, "Pausing a consumer": the lag and checkpoint alerts stay silent
    while paused, as the pods export lag and checkpoint age only for what they hold."""
    released = consumer_metrics.PartitionStats(
        events=10,
        owned=False,
        processed_sequence_number=9,
        checkpointed_sequence_number=9,
        checkpoint_time=100.0,
        last_enqueued=deliveries.LastEnqueued(
            sequence_number=500, offset="50000", enqueued_time=None, retrieved_time=None
        ),
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(consumer_metrics.RuntimeCollector(lambda: {"0": released}, now=lambda: 9e3))
    text = generate_latest(registry).decode()
    assert 'ehb_consumer_events_total{partition="0"} 10.0' in text
    assert "ehb_consumer_owned_partitions 0.0" in text
    for alert in ("EventHubConsumerLagGrowing", "EventHubCheckpointStale"):
        (rule,) = [r for r in alerts() if r["alert"] == alert]
        assert "ehb_consumer_lag_events" in rule["expr"]
    assert "ehb_consumer_lag_events{" not in text
    assert "ehb_consumer_checkpoint_age_seconds{" not in text
    page = OPERATIONS.read_text()
    assert "`EventHubConsumerLagGrowing` and `EventHubCheckpointStale` stay silent too" in page


# promtool


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    result = promtool("test", "rules", str(RULES_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_a_severity_and_a_runbook() -> None:
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULES_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    runbook = OPERATIONS.read_text().split("## Dashboards and alerts", 1)
    assert len(runbook) == 2, "docs/operations.md needs its 'Dashboards and alerts' section"
    names = [rule["alert"] for rule in alerts()]
    assert len(names) >= 6
    assert sorted(set(names) - tested) == []
    assert [n for n in names if f"### {n}" not in runbook[1]] == []
    assert {rule["labels"]["severity"] for rule in alerts()} <= {"warning", "critical"}


def test_every_alert_points_on_call_at_its_runbook() -> None:
    """The notification itself says where the runbook is: docs/operations.md, at the anchor
    mkdocs gives the alert's heading (the name in lower case)."""
    page = OPERATIONS.read_text()
    for rule in alerts():
        runbook = rule["annotations"].get("runbook", "")
        assert runbook == f"docs/operations.md#{rule['alert'].lower()}", rule["alert"]
        assert f"\n### {rule['alert']}\n" in page


def test_the_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    queries = [without_grafana_variables(q) for q in dashboard_queries()]
    assert not [q for q in queries if "$" in q], "a Grafana variable without a stand-in"
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query{i}", "expr": q} for i, q in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def panel_query(title: str, legend: str) -> str:
    """The query of a panel's target, with the stand-ins of Grafana's variables."""
    (query,) = [
        t["expr"]
        for p in panels()
        if p["title"] == title
        for t in p["targets"]
        if t.get("legendFormat") == legend
    ]
    return without_grafana_variables(query)


@pytest.mark.parametrize(
    ("title", "legend", "family", "labels"),
    [
        ("Hand-offs", "{{outcome}}", "ehb_handoff_duration_seconds", {"outcome": "timeout"}),
        ("Moves", "{{kind}} {{reason}}", "ehb_moves", {"kind": "takeover", "reason": "timeout"}),
        ("Cycles by result", "{{result}}", "ehb_cycles", {"result": "Forbidden"}),
    ],
)
def test_a_counter_panel_shows_a_series_first_count(
    tmp_path: Path, title: str, legend: str, family: str, labels: dict[str, str]
) -> None:
    """The operator's series of a consumer's timed-out hand-offs (of its moves of a kind and
    reason, of its cycles that ended with a result) is born at 1 at the first one, which
    increase() alone counts as no increase: the panel shows it, as the alert
    EventHubHandoffTimedOut fires on the first timeout, and a consumer's first failed cycle
    shows.
    Evaluated by promtool over series as Prometheus stores them ($__rate_interval as 5m, the
    test's clock starting at 0)."""
    query = panel_query(title, legend)
    count = f"{family}_count" if family.endswith("_seconds") else f"{family}_total"
    created = f"{family}_created"
    shown = "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    # 4m: the first, at 3m (_created 180 s); 6m: the second, at 5m, too; 9m: the second
    # only, the first is older than 5 minutes; 20m: none any more.
    expected = [
        {"expr": query, "eval_time": at, "exp_samples": [{"labels": shown, "value": n}]}
        for at, n in (("4m", 1), ("6m", 2), ("9m", 1), ("20m", 0))
    ]
    orders = ", ".join(
        f'{k}="{v}"' for k, v in {"namespace": "shop", "consumer": "orders", **labels}.items()
    )
    # Counted two hours before Prometheus first scraped it: not one of the panel's.
    invoices = orders.replace('"orders"', '"invoices"')
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"{count}{{{orders}}}", "values": "_ _ _ 1 1 2x20"},
                    {"series": f"{created}{{{orders}}}", "values": "_ _ _ 180x22"},
                    {"series": f"{count}{{{invoices}}}", "values": "_ _ _ 3x22"},
                    {"series": f"{created}{{{invoices}}}", "values": "_ _ _ -7200x22"},
                ],
                "promql_expr_test": expected,
            }
        ],
    }
    path = tmp_path / "panel.test.yaml"
    path.write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_query_is_refused_by_the_same_check(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "dashboard:broken", "expr": "sum by (pod (ehb_members)"}
    ]}]}))  # fmt: skip
    assert promtool("check", "rules", str(path)).returncode != 0


# The dashboard


def test_the_dashboard_shows_what_operators_ask_for() -> None:
    board = dashboard()
    assert board["uid"] == "eventhub-balancer"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    used = set().union(*(metric_names(q) for q in dashboard_queries()))
    assert {
        "ehb_consumer_lag_events",  # lag per partition and per pod
        "ehb_consumer_events_total",  # events/s
        "ehb_handoff_duration_seconds_count",  # hand-offs
        "ehb_moves_total",  # moves
        "ehb_cycle_duration_seconds_bucket",  # cycle duration
        "ehb_partitions_troubled",  # failing partitions
        "ehb_consumer_checkpoint_age_seconds",  # checkpoint age
    } <= used
    titles = {p["title"] for p in panels()}
    assert {"Lag per partition", "Lag per pod"} <= titles
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "namespace", "consumer", "pod"} <= variables


# Every metric name exists


def test_metric_names_are_found_in_queries() -> None:
    expr = 'sum by (pod) (rate(ehb_moves_total{namespace=~"x"}[5m])) / ehb_members'
    assert metric_names(expr) == {"ehb_moves_total", "ehb_members"}


async def test_every_metric_the_dashboard_and_the_alerts_use_is_on_a_live_metrics_page() -> None:
    exported = exported_names(await operator_exposition()) | exported_names(consumer_exposition())
    assert {"ehb_moves_total", "ehb_cycle_duration_seconds_bucket"} <= exported
    used = {
        **{n: "dashboard" for q in dashboard_queries() for n in metric_names(q)},
        **{n: f"alert {r['alert']}" for r in alerts() for n in metric_names(r["expr"])},
    }
    missing = {name: where for name, where in used.items() if name not in exported}
    assert missing == {}
    assert "ehb_no_such_metric" not in exported


async def test_the_operations_page_lists_every_metric_the_operator_exports() -> None:
    """The "Metrics:" paragraph of docs/operations.md is where an operator looks a metric up:
    each family on the operator's live /metrics page is in it."""
    text = OPERATIONS.read_text()
    start = text.index("\nMetrics: `ehb_")
    listed = metric_names(text[start : text.index("\n\n", start)])
    families = {
        family.name
        for family in parser.text_string_to_metric_families(await operator_exposition())
        # prometheus_client's counters and histograms have a *_created family beside them
        if family.name.startswith("ehb_") and not family.name.endswith("_created")
    }
    assert len(families) >= 15
    missing = sorted(f for f in families if not ({f, f + "_total", f + "_info"} & listed))
    assert missing == []


# The chart


def test_the_chart_copies_equal_the_monitoring_files() -> None:
    for copy, source in CHART_COPIES.items():
        assert copy.read_bytes() == source.read_bytes(), (
            f"copy {source.relative_to(loading.ROOT)} to {copy.relative_to(loading.ROOT)}"
        )


def test_the_chart_leaves_monitoring_out_by_default() -> None:
    docs = loading.rendered(None)
    assert [d for d in docs if d.kind == "PrometheusRule"] == []
    assert [
        d for d in docs if "grafana_dashboard" in (d.body["metadata"].get("labels") or {})
    ] == []


def rendered_with_monitoring(release: str = loading.RELEASE) -> list[dict[str, Any]]:
    manifests = charts.render(
        loading.CHART_DIR, MONITORING_VALUES, name=release, namespace=loading.RELEASE_NAMESPACE
    )
    return charts.documents(manifests)


def test_helm_lint_is_clean_with_monitoring_on() -> None:
    report = charts.lint(loading.CHART_DIR, MONITORING_VALUES, namespace=loading.RELEASE_NAMESPACE)
    assert report.problems == ()
    assert report.passed


def test_the_chart_renders_the_dashboard_and_the_rules_behind_values() -> None:
    docs = rendered_with_monitoring()
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["namespace"] == loading.RELEASE_NAMESPACE
    (board,) = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert json.loads(board["data"]["eventhub-balancer.json"]) == dashboard()
    assert board["metadata"]["annotations"] == {"grafana_folder": "Event Hubs"}


def test_long_release_names_keep_the_monitoring_names_within_63_characters() -> None:
    docs = rendered_with_monitoring("a-release-name-that-is-exactly-fifty-three-chars-long")
    names = [d["metadata"]["name"] for d in docs if d["kind"] in ("PrometheusRule", "ConfigMap")]
    assert len(names) == 2
    assert all(len(n) <= 63 for n in names), names


def test_the_values_schema_refuses_a_misspelt_monitoring_key() -> None:
    with pytest.raises(charts.HelmError, match="don't meet the specifications") as e:
        charts.render(
            loading.CHART_DIR,
            {"monitoring": {"dashbaord": {"enabled": True}}},
            name=loading.RELEASE,
            namespace=loading.RELEASE_NAMESPACE,
        )
    assert "/monitoring" in str(e.value)
