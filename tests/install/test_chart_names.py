"""The values of both charts that become Kubernetes names, and the image reference.

- A name Kubernetes would refuse (``Shop``, ``a b``, ``-1``, 64 characters) is refused by the
  chart's values schema, naming the value. Before, `helm install` got as far as the API server,
  which refused an object made from it ("NetworkPolicy ``ehb-Shop`` is invalid"), or the pod
  failed later on its image (``InvalidImageName``).
- A name Kubernetes takes but YAML reads as something else (``0``, ``1e5``, ``no``, ``on``,
  ``null``) renders as the string it is. Before, ``serviceAccount.name: "0"`` rendered
  ``name: 0``, and the API server refused the ServiceAccount with "cannot unmarshal number into
  Go struct field ObjectMeta.metadata.name of type string"; a namespace called ``no`` became
  ``namespace: false``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.install import test_chart_kube_versions as versions
from tests.support import charts, kubeschemas, loading

OPERATOR_CHART = loading.ROOT / "charts" / "eventhub-balancer"
CONSUMER_CHART = loading.ROOT / "charts" / "eventhub-consumer"
#: What the consumer chart needs to render at all.
HUB = {"fullyQualifiedNamespace": "shop.servicebus.windows.net", "name": "orders"}
#: Names YAML reads as a number, a boolean or null when they are written bare.
TRICKY = ("0", "1e5", "no", "on", "null", "0x1f", "true")
KUBE_VERSION = "1.33.0"
#: The kinds of ours and kopf's, whose schemas are CRDs (not Kubernetes' own).
OUR_GROUPS = frozenset({"eventhub-balancer.dev", "kopf.dev"})


class GoYAMLLoader(yaml.SafeLoader):
    """PyYAML as Helm and kubectl read a manifest: YAML 1.1 booleans (``no``, ``on``), and
    Go's floats, which need no dot (``1e5``), where PyYAML alone reads ``1e5`` as text."""


GoYAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"),
    list("-+0123456789."),
)


def nested(path: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    out: dict[str, Any] = {}
    node = out
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


def consumer_values(**more: Any) -> dict[str, Any]:
    """The consumer chart's required values, and ``more`` at the top level."""
    return {"consumer": {"eventHub": dict(HUB)}, **more}


#: (chart, value path, what the schema must refuse there).
REFUSED = [
    (OPERATOR_CHART, "nameOverride", "Shop"),
    (OPERATOR_CHART, "nameOverride", "a b"),
    (OPERATOR_CHART, "fullnameOverride", "-1"),
    # The metrics Service is named after it, and a Service's name starts with a letter.
    (OPERATOR_CHART, "fullnameOverride", "0ops"),
    (OPERATOR_CHART, "serviceAccount.name", "Shop"),
    (OPERATOR_CHART, "serviceAccount.name", "x" * 254),
    (OPERATOR_CHART, "metrics.certSecret", "metrics cert"),
    (OPERATOR_CHART, "priorityClassName", "High"),
    (OPERATOR_CHART, "serviceMonitor.namespace", "Monitoring"),
    (OPERATOR_CHART, "monitoring.dashboard.namespace", "grafana dashboards"),
    (OPERATOR_CHART, "monitoring.prometheusRule.namespace", "-monitoring"),
    (OPERATOR_CHART, "image.repository", "Example/Operator"),
    (OPERATOR_CHART, "image.repository", "registry.example/eventhub balancer"),
    (OPERATOR_CHART, "image.tag", "-1"),
    (OPERATOR_CHART, "image.tag", "1.0 beta"),
    (CONSUMER_CHART, "nameOverride", "Orders"),
    (CONSUMER_CHART, "fullnameOverride", "orders,eu"),
    (CONSUMER_CHART, "serviceAccount.name", "-orders"),
    (CONSUMER_CHART, "podMonitor.namespace", "Monitoring"),
    (CONSUMER_CHART, "image.repository", "orders:1.0"),
    (CONSUMER_CHART, "image.tag", "x" * 129),
    (CONSUMER_CHART, "tmpSizeLimit", "-1"),
    (CONSUMER_CHART, "spark.localSizeLimit", "4 GB"),
]


def render(chart: Path, values: dict[str, Any]) -> dict[str, str]:
    return charts.render(chart, values, name="ehb", namespace="ehb", kube_version=KUBE_VERSION)


def chart_id(value: object) -> str:
    return value.name if isinstance(value, Path) else str(value)[:20]


def with_base(chart: Path, values: dict[str, Any]) -> dict[str, Any]:
    """``values``, with what the consumer chart requires (none of them is under ``consumer``)."""
    return consumer_values(**values) if chart == CONSUMER_CHART else values


@pytest.mark.parametrize(("chart", "path", "value"), REFUSED, ids=chart_id)
def test_a_name_kubernetes_refuses_is_refused_by_the_values_schema(
    chart: Path, path: str, value: str
) -> None:
    with pytest.raises(charts.HelmError, match="don't meet the specifications") as e:
        render(chart, with_base(chart, nested(path, value)))
    assert f"at '/{path.replace('.', '/')}'" in str(e.value)


@pytest.mark.parametrize(
    "repository",
    [
        "eventhub-balancer-operator",
        "ghcr.io/example/eventhub-balancer-operator",
        "localhost:5000/ehb",
        "Registry.Example:443/team/sub_team/ehb__operator",
        "example.azurecr.io/a.b/c-d--e",
        "192.168.1.10:5000/ehb",
    ],
)
@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_an_image_reference_a_registry_takes_renders(chart: Path, repository: str) -> None:
    values = with_base(chart, {"image": {"repository": repository, "tag": "v1.2.3_rc-1"}})
    docs = charts.documents(render(chart, values))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{repository}:v1.2.3_rc-1"


def tricky_operator_values(word: str) -> dict[str, Any]:
    return {
        "nameOverride": word,
        "serviceAccount": {"create": True, "name": word},
        "metrics": {"certSecret": word},
        "priorityClassName": word,
        "peering": {"enabled": True, "name": word},
        "watchNamespaces": [word],
        "tenantNamespaces": [word],
        "serviceMonitor": {"enabled": True, "namespace": word},
        "monitoring": {
            "dashboard": {"enabled": True, "namespace": word},
            "prometheusRule": {"enabled": True, "namespace": word},
        },
    }


def tricky_consumer_values(word: str) -> dict[str, Any]:
    secret = {"connectionStringSecretRef": {"name": word, "key": word}}
    values = consumer_values(
        nameOverride=word,
        serviceAccount={"create": True, "name": word},
        podMonitor={"enabled": True, "namespace": word},
    )
    values["consumer"]["name"] = word
    values["consumer"]["eventHub"]["credentials"] = secret
    values["consumer"]["checkpointStore"] = {"containerName": "checkpoints", "credentials": secret}
    return values


def strings_expected(body: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every value at a key that holds a name, a namespace, a Secret key or a label."""
    if isinstance(body, dict):
        for key, value in body.items():
            where = f"{path}.{key}"
            if key in {"labels", "matchLabels"} and isinstance(value, dict):
                yield from ((f"{where}.{k}", v) for k, v in value.items())
            elif key in NAME_KEYS and not isinstance(value, (dict, list)):
                yield where, value
            else:
                yield from strings_expected(value, where)
    elif isinstance(body, list):
        for i, item in enumerate(body):
            yield from strings_expected(item, f"{path}[{i}]")


NAME_KEYS = frozenset(
    {
        "name",
        "namespace",
        "serviceAccountName",
        "secretName",
        "priorityClassName",
        "policyName",
        "key",
        "namespaces",
    }
)


@pytest.mark.parametrize("word", TRICKY)
@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_a_name_yaml_would_read_as_a_number_or_a_boolean_renders_as_text(
    chart: Path, word: str
) -> None:
    values = (
        tricky_operator_values(word) if chart == OPERATOR_CHART else tricky_consumer_values(word)
    )
    rendered = charts.render(
        chart,
        values,
        name=word,
        namespace=word,
        kube_version=KUBE_VERSION,
        api_versions=("monitoring.coreos.com/v1",),
    )
    docs = [
        body
        for _path, text in sorted(rendered.items())
        for body in yaml.load_all(text, Loader=GoYAMLLoader)
        if body
    ]
    wrong = [
        f"{d['kind']}{where}: {value!r}"
        for d in docs
        for where, value in strings_expected(d)
        if not isinstance(value, str)
    ]
    assert not wrong, wrong
    assert {d["metadata"].get("namespace") for d in docs} - {None} == {word}
    for body in docs:
        if body["apiVersion"].split("/")[0] in OUR_GROUPS | versions.THIRD_PARTY_GROUPS:
            continue
        try:
            kubeschemas.validate(body, KUBE_VERSION)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{body['kind']}: {'.'.join(map(str, e.path))}: {e.message}")


#: A label's value as the API server takes it.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


@pytest.mark.parametrize(
    ("tag", "label"),
    [
        ("v1.2.3_rc-1", "v1.2.3_rc-1"),
        ("1.0_", "1.0"),
        ("_1.0", "1.0"),
        ("1.0--", "1.0"),
        ("1.0.", "1.0"),
        # Cut to 63 characters, the 63rd a dot.
        ("v" + "1" * 61 + "._x", "v" + "1" * 61),
        ("___", ""),
    ],
)
@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_an_image_tag_becomes_a_version_label_the_api_server_takes(
    chart: Path, tag: str, label: str
) -> None:
    """A tag may start with '_' and end with '.', '_' or '-'; a label value may not. Until
    5 December such a tag rendered as it was, and the API server refused every object."""
    values = with_base(chart, {"image": {"repository": "ehb", "tag": tag}})
    docs = charts.documents(render(chart, values))
    labelled = [
        d["metadata"]["labels"]
        for d in docs
        if "app.kubernetes.io/version" in d["metadata"].get("labels", {})
    ] + [d["spec"]["template"]["metadata"]["labels"] for d in docs if d["kind"] == "Deployment"]
    assert len(labelled) > 2
    for labels in labelled:
        assert labels["app.kubernetes.io/version"] == label
        assert LABEL_VALUE.fullmatch(label)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ehb:{tag}"


class StrictLoader(GoYAMLLoader):
    """GoYAMLLoader that refuses a key given twice in one mapping, which YAML 1.2 forbids
    (PyYAML and kubectl keep the last one without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(None, None, f"keys given twice: {twice}")
        return super().construct_mapping(node, deep=deep)


def chart_values(chart: Path, **values: Any) -> dict[str, Any]:
    return consumer_values(**values) if chart == CONSUMER_CHART else values


@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_added_labels_take_the_charts_own_once_and_keep_the_selector(chart: Path) -> None:
    """commonLabels and podLabels may set the chart's labels that select nothing (part-of,
    version): each key is written once, the user's value, and the selector still matches the
    pods. Before, the key was written twice, the user's second."""
    values = chart_values(
        chart,
        commonLabels={"app.kubernetes.io/part-of": "payments", "team": "orders"},
        podLabels={"app.kubernetes.io/version": "pinned", "tier": "backend"},
    )
    rendered = render(chart, values)
    docs = [
        body
        for _path, text in sorted(rendered.items())
        for body in yaml.load_all(text, Loader=StrictLoader)
        if body
    ]
    for body in docs:
        labels = body["metadata"].get("labels", {})
        assert labels["app.kubernetes.io/part-of"] == "payments", body["kind"]
        assert labels["team"] == "orders"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod["app.kubernetes.io/version"] == "pinned"
    assert pod["tier"] == "backend"
    assert pod["app.kubernetes.io/part-of"] == "payments"
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod.items()


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("commonLabels", "app.kubernetes.io/instance"),
        ("commonLabels", "app.kubernetes.io/component"),
        ("podLabels", "app.kubernetes.io/name"),
    ],
)
@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_an_added_label_the_chart_selects_by_is_refused_naming_it(
    chart: Path, key: str, label: str
) -> None:
    """The Deployment's selector matched none of its pods: the API server refused it, after
    the release's other objects were applied, with "`selector` does not match template
    `labels`" (seen on the real control plane)."""
    with pytest.raises(charts.HelmError) as e:
        render(chart, chart_values(chart, **{key: {label: "x"}}))
    said = " ".join(str(e.value).split())
    assert f"{key} sets {label}, a label the chart selects its pods by" in said
    assert ("(nameOverride sets it)" in said) == (label == "app.kubernetes.io/name")


@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_an_added_label_the_api_server_refuses_is_refused_naming_it(chart: Path) -> None:
    with pytest.raises(charts.HelmError) as e:
        render(chart, chart_values(chart, podLabels={"te am": "x"}))
    assert 'podLabels: "te am" is not a label key' in " ".join(str(e.value).split())
    # The API server bounds a key's DNS prefix at 253 characters, a bound no pattern holds.
    prefix = ".".join(["a" * 63] * 3 + ["a" * 62])
    with pytest.raises(charts.HelmError) as e:
        render(chart, chart_values(chart, commonLabels={f"{prefix}/team": "x"}))
    assert "is not a label key" in str(e.value)
    assert "at most 253 characters" in " ".join(str(e.value).split())
    rendered = render(chart, chart_values(chart, commonLabels={f"{prefix[1:]}/team": "x"}))
    assert any(f"{prefix[1:]}/team" in text for text in rendered.values())
    for key in ("commonLabels", "podLabels", "nodeSelector"):
        with pytest.raises(charts.HelmError, match="don't meet the specifications") as e:
            render(chart, chart_values(chart, **{key: {"team": "a b"}}))
        assert f"at '/{key}/team'" in str(e.value)
