"""The consumer chart (charts/eventhub-consumer): a workload that runs as the runtime needs.

Rendered by `helm template` for every Kubernetes minor its kubeVersion admits, with the values it
requires and every ci/ values file: the built-in objects validate against that minor's schemas, the
EventHubConsumer against the CRD (schema and CEL rules), and the Deployment carries what
``ehb consume`` reads, with timeouts that let a release finish before Kubernetes or the
operator moves on.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from eventhub_balancer import cli, errors
from eventhub_balancer.contracts import labelselectors
from eventhub_balancer.spark import flags
from tests.install import test_chart_kube_versions as versions
from tests.install import test_crd_rules as crd_rules
from tests.install.test_chart import undocumented_values
from tests.support import charts, kubeschemas, loading

CHART_DIR = loading.ROOT / "charts" / "eventhub-consumer"
CI_VALUES = sorted((CHART_DIR / "ci").glob("*-values.yaml"))
#: The values the example project installs with (docs/first-consumer.md).
EXAMPLE_VALUES = loading.ROOT / "examples" / "orders" / "values.yaml"
#: What the chart requires (it has no default hub): the ci/ files and the example give it too.
REQUIRED: dict[str, Any] = {
    "consumer": {
        "eventHub": {"fullyQualifiedNamespace": "shop.servicebus.windows.net", "name": "orders"}
    }
}
VALUES_FILES = [None, *CI_VALUES, EXAMPLE_VALUES]
MINORS = list(range(versions.declared_floor(CHART_DIR)[1], versions.MINORS[-1] + 1))
NAMESPACE = "shop"


def label(values_file: Path | None) -> str:
    return str(values_file.relative_to(loading.ROOT)) if values_file else "defaults"


def merged(base: dict[str, Any], over: dict[str, Any] | None) -> dict[str, Any]:
    """``over`` on ``base``, maps merged key by key, as Helm merges two values files."""
    result = dict(base)
    for key, value in (over or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def with_required(values_file: Path | None) -> dict[str, Any]:
    """A values file's values, over what the chart requires."""
    return merged(REQUIRED, loading.load_values(values_file))


def render(
    values: dict[str, Any] | None = None, *, required: bool = True
) -> dict[str, list[dict[str, Any]]]:
    """kind -> documents, for ``values`` over the chart's defaults (and ``REQUIRED``)."""
    rendered = charts.render(
        CHART_DIR,
        merged(REQUIRED, values) if required else values,
        name="orders",
        namespace=NAMESPACE,
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for body in charts.documents(rendered):
        found.setdefault(body["kind"], []).append(body)
    return found


def container(docs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    (deployment,) = docs["Deployment"]
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    return found  # type: ignore[no-any-return]


def args_value(args: list[str], flag: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return value


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=label)
def test_helm_lint_is_clean(values_file: Path | None) -> None:
    report = charts.lint(CHART_DIR, with_required(values_file), namespace=NAMESPACE)
    assert report.problems == ()
    assert report.missing == ()
    assert report.passed


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({}, "consumer.eventHub.fullyQualifiedNamespace is required"),
        (
            {"consumer": {"eventHub": {"fullyQualifiedNamespace": "shop.servicebus.windows.net"}}},
            "consumer.eventHub.name is required",
        ),
    ],
)
def test_an_install_without_its_hub_fails_and_names_the_value(
    values: dict[str, Any], named: str
) -> None:
    """No default hub: forgetting --set fails, rather than reading someone else's hub."""
    with pytest.raises(charts.HelmError, match=named):
        render(values, required=False)
    report = charts.lint(CHART_DIR, values, namespace=NAMESPACE)
    assert any(missing.startswith(named) for missing in report.missing)


def test_the_example_values_without_the_set_fail_as_the_first_consumer_page_says() -> None:
    """docs/first-consumer.md installs with `-f examples/orders/values.yaml --set
    consumer.eventHub.fullyQualifiedNamespace=...`, and says that leaving the --set out fails.
    The example's values named the placeholder namespace shop.servicebus.windows.net, so the
    install went through and its consumer read a hub under a name someone else may own."""
    named = "consumer.eventHub.fullyQualifiedNamespace is required"
    with pytest.raises(charts.HelmError, match=named):
        render(loading.load_values(EXAMPLE_VALUES), required=False)
    page = " ".join((loading.ROOT / "docs" / "first-consumer.md").read_text().split())
    assert f"`helm install` fails: `{named}: your Event Hubs namespace's host" in page


def test_a_chart_that_joins_pods_to_a_consumer_made_elsewhere_needs_no_hub() -> None:
    docs = render({"consumer": {"create": False, "name": "orders"}}, required=False)
    assert "EventHubConsumer" not in docs
    assert {e.get("value") for e in container(docs)["env"]} >= {"orders"}


def test_every_value_is_commented_and_typed() -> None:
    assert undocumented_values((CHART_DIR / "values.yaml").read_text()) == []
    schema, values = charts.chart_schema(CHART_DIR), charts.chart_values(CHART_DIR)
    assert set(values) <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_the_chart_is_versioned_with_the_product() -> None:
    import yaml

    from eventhub_balancer import __version__

    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=label)
@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_every_rendering_validates_against_its_minor(minor: int, values_file: Path | None) -> None:
    version = f"1.{minor}.0"
    rendered = charts.render(
        CHART_DIR,
        with_required(values_file),
        name="orders",
        namespace=NAMESPACE,
        kube_version=version,
    )
    docs = charts.documents(rendered)
    assert {d["kind"] for d in docs} >= {"Deployment", "Role", "PodDisruptionBudget"}
    for body in docs:
        if body["apiVersion"].split("/")[0] in versions.THIRD_PARTY_GROUPS | {
            "eventhub-balancer.dev"
        }:
            continue
        try:
            kubeschemas.validate(body, version)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(map(str, e.path))
            pytest.fail(f"{body['kind']} {body['metadata']['name']} on {version}: {path}: {e}")


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=label)
def test_the_eventhubconsumer_passes_the_crd(values_file: Path | None) -> None:
    (consumer,) = render(loading.load_values(values_file))["EventHubConsumer"]
    problems = [
        e.message for e in jsonschema.Draft7Validator(crd_rules.SCHEMA).iter_errors(consumer)
    ]
    assert problems == []
    assert crd_rules.failures(consumer) == []


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=label)
def test_the_pods_carry_what_the_runtime_reads(values_file: Path | None) -> None:
    docs = render(loading.load_values(values_file))
    (consumer,) = docs["EventHubConsumer"]
    (deployment,) = docs["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    found = container(docs)
    env = {e["name"]: e for e in found["env"]}
    assert env["EHB_CONSUMER"]["value"] == consumer["metadata"]["name"]
    for name, path in (
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_UID", "metadata.uid"),
    ):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == path
    # The EventHubConsumer selects exactly these pods, and so does the budget.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert consumer["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # And an operator whose --pod-selector is the documented one watches them.
    key, value = labelselectors.CONSUMER_POD_LABEL
    assert labels[key] == value
    (budget,) = docs["PodDisruptionBudget"]
    assert budget["spec"]["selector"]["matchLabels"] == consumer["spec"]["selector"]["matchLabels"]
    # The pods read the same Secrets the EventHubConsumer names, as files the kubelet keeps up
    # to date (a rotated key needs no restart), and none with workload identity.
    secret_files = mounted_secret_files(pod, found)
    for part, variable in (
        ("eventHub", "EHB_EVENTHUB_CONNECTION_STRING"),
        ("checkpointStore", "EHB_BLOB_CONNECTION_STRING"),
    ):
        ref = consumer["spec"][part]["credentials"].get("connectionStringSecretRef")
        assert variable not in env  # read once at the container's start: never by the chart
        if ref is None:
            assert f"{variable}_FILE" not in env
        else:
            assert secret_files[env[f"{variable}_FILE"]["value"]] == ref
    # The Role is bound to the pods' ServiceAccount and grants only what the runtime uses.
    (role,) = docs["Role"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch", "patch"]}
    ]
    (binding,) = docs["RoleBinding"]
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    # The args are `ehb` arguments the CLI parses.
    parsed = cli.build_parser().parse_args(found["args"])
    assert parsed.command == "consume"
    assert found["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert found["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def mounted_secret_files(pod: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """{path in the container: {name, key} of the Secret it holds}, for the container's
    Secret volumes; each mounted as a whole directory (a subPath mount is never updated)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, Any] = {}
    for mount in found["volumeMounts"]:
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        assert "subPath" not in mount
        assert mount["readOnly"] is True
        for item in secret["items"]:
            path = f"{mount['mountPath']}/{item['path']}"
            files[path] = {"name": secret["secretName"], "key": item["key"]}
    return files


def test_a_connection_string_the_user_sets_in_extra_env_is_theirs() -> None:
    """Set by hand (either form), the chart mounts nothing for it: the pod would refuse a
    variable and its _FILE form together."""
    docs = render(
        {
            "extraEnv": [
                {
                    "name": "EHB_BLOB_CONNECTION_STRING",
                    "valueFrom": {"secretKeyRef": {"name": "mine", "key": "blob"}},
                }
            ]
        }
    )
    (deployment,) = docs["Deployment"]
    found = container(docs)
    names = [e["name"] for e in found["env"]]
    assert names.count("EHB_BLOB_CONNECTION_STRING") == 1
    assert "EHB_BLOB_CONNECTION_STRING_FILE" not in names
    files = mounted_secret_files(deployment["spec"]["template"]["spec"], found)
    assert list(files.values()) == [{"name": "orders-eh", "key": "connectionString"}]
    assert "EHB_EVENTHUB_CONNECTION_STRING_FILE" in names


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=label)
def test_a_release_finishes_before_anyone_moves_on(values_file: Path | None) -> None:
    docs = render(loading.load_values(values_file))
    args = container(docs)["args"]
    release = float(args_value(args, "--release-timeout"))
    handler_exit = float(args_value(args, "--handler-exit-seconds"))
    shutdown = float(args_value(args, "--shutdown-timeout"))
    (deployment,) = docs["Deployment"]
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    (consumer,) = docs["EventHubConsumer"]
    handoff = consumer["spec"]["balancing"]["handoffTimeoutSeconds"]
    assert release + handler_exit < shutdown < grace
    assert release + handler_exit < handoff


def test_a_handoff_timeout_below_the_release_is_refused() -> None:
    with pytest.raises(charts.HelmError, match=r"must exceed timeouts\.releaseSeconds"):
        render({"consumer": {"balancing": {"handoffTimeoutSeconds": 10}}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"consumer": {"eventHub": {"credentials": {"workloadIdentity": {}}}}},
            "consumer.eventHub.credentials: give exactly one of",
        ),
        (
            {"consumer": {"checkpointStore": {"credentials": {"connectionStringSecretRef": None}}}},
            "consumer.checkpointStore.credentials: give exactly one of",
        ),
        (
            {
                "consumer": {
                    "checkpointStore": {
                        "credentials": {"connectionStringSecretRef": None, "workloadIdentity": {}}
                    }
                }
            },
            "accountUrl is required with workloadIdentity",
        ),
        ({"spark": {"remote": "sc://spark:15002"}}, "only go with spark.enabled=true"),
        (
            {"autoscaling": {"keda": {"enabled": True, "minReplicas": 5, "maxReplicas": 3}}},
            "KEDA could never scale within them; lower minReplicas or raise maxReplicas",
        ),
        # The schema's "maxProperties: got 1, want 0" named neither the key nor where it goes.
        (
            {"consumer": {"eventHub": {"credentials": {"workloadIdentity": {"clientId": "0000"}}}}},
            "consumer.eventHub.credentials.workloadIdentity.clientId: the identity is not "
            "chosen here",
        ),
        (
            {
                "consumer": {
                    "checkpointStore": {
                        "accountUrl": "https://shop.blob.core.windows.net",
                        "credentials": {
                            "connectionStringSecretRef": None,
                            "workloadIdentity": {"clientId": "0000"},
                        },
                    }
                }
            },
            "set workloadIdentity.clientId at the top level of the values",
        ),
        (
            {"podDisruptionBudget": {"enabled": True, "maxUnavailable": 0}},
            "podDisruptionBudget.maxUnavailable: 0 lets no consumer pod be evicted",
        ),
        (
            {"podDisruptionBudget": {"enabled": True, "maxUnavailable": "0%"}},
            "podDisruptionBudget.maxUnavailable: 0 lets no consumer pod be evicted",
        ),
    ],
)
def test_mistakes_fail_with_what_to_change(values: dict[str, Any], message: str) -> None:
    with pytest.raises(charts.HelmError, match=message.replace(".", r"\.")):
        render(values)


BAD_NAME = {"name": "Bad_Name", "key": "connectionString"}
BAD_KEY = {"name": "orders-blob", "key": "connection string"}


@pytest.mark.parametrize(("host", "rule"), crd_rules.HOST_MISTAKES)
def test_a_host_that_is_not_one_is_refused_in_the_crds_words(host: str, rule: int) -> None:
    """The template refuses it before anything is applied, as the CRD's rule would after the
    Secrets, the Role and the Deployment were; a connection string is not repeated."""
    with pytest.raises(charts.HelmError) as e:
        render({"consumer": {"eventHub": {"fullyQualifiedNamespace": host}}})
    said = " ".join(str(e.value).split())
    assert "don't meet the specifications" not in said
    words = crd_rules.host_messages()[rule].removeprefix("eventHub.fullyQualifiedNamespace ")
    assert f"consumer.eventHub.fullyQualifiedNamespace {words}" in said or (
        f"consumer.eventHub.fullyQualifiedNamespace {json.dumps(host)} {words}" in said
    )
    assert "SharedAccessKey" not in said


@pytest.mark.parametrize(("url", "rule"), crd_rules.BLOB_MISTAKES)
def test_an_account_url_that_is_not_one_is_refused_in_the_crds_words(url: str, rule: int) -> None:
    with pytest.raises(charts.HelmError) as e:
        render({"consumer": {"checkpointStore": {"accountUrl": url}}})
    said = " ".join(str(e.value).split())
    assert "don't meet the specifications" not in said
    words = (
        crd_rules.blob_messages()[rule]
        .removeprefix("checkpointStore.accountUrl ")
        .replace("checkpointStore.", "consumer.checkpointStore.")
    )
    field = "consumer.checkpointStore.accountUrl"
    assert f"{field} {words}" in said or f"{field} {json.dumps(url)} {words}" in said
    assert "AccountKey" not in said


@pytest.mark.parametrize(("name", "rule"), crd_rules.CONTAINER_MISTAKES)
def test_a_container_name_that_is_not_one_is_refused_in_the_crds_words(
    name: str, rule: int
) -> None:
    with pytest.raises(charts.HelmError) as e:
        render({"consumer": {"checkpointStore": {"containerName": name}}})
    said = " ".join(str(e.value).split())
    assert "don't meet the specifications" not in said
    words = crd_rules.container_messages()[rule].removeprefix("checkpointStore.containerName ")
    assert f"consumer.checkpointStore.containerName {json.dumps(name)} {words}" in said


def test_the_charts_host_and_port_patterns_are_the_crds() -> None:
    """The template checks what the CRD's rules check: one pattern each, held to the CRD's."""
    helpers = (CHART_DIR / "templates" / "_helpers.tpl").read_text()
    rules = [
        rule["rule"]
        for field in (("eventHub", "fullyQualifiedNamespace"), ("checkpointStore", "accountUrl"))
        for rule in crd_rules.SCHEMA["properties"]["spec"]["properties"][field[0]]["properties"][
            field[1]
        ]["x-kubernetes-validations"]
    ]
    for name in ("hostPattern", "portPattern"):
        found = re.search(
            r'define "eventhub-consumer\.' + name + r'" -}}\n(.+)\n\{\{- end', helpers
        )
        assert found is not None, name
        assert sum(found.group(1) in rule for rule in rules) >= 2, (name, found.group(1))


@pytest.mark.parametrize("host", ["shop.servicebus.windows.net", "127.0.0.1:5672"])
def test_a_host_is_rendered_as_given(host: str) -> None:
    (consumer,) = render({"consumer": {"eventHub": {"fullyQualifiedNamespace": host}}})[
        "EventHubConsumer"
    ]
    assert consumer["spec"]["eventHub"]["fullyQualifiedNamespace"] == host


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"handler": "orders.pipeline"}, "/handler"),
        ({"logFormat": "yaml"}, "/logFormat"),
        # What to give, not "'oneOf' failed, none matched" and one line per branch.
        (
            {"consumer": {"startPosition": "beginning"}},
            "at '/consumer/startPosition': value must be one of 'earliest', 'latest'",
        ),
        (
            {"consumer": {"startPosition": {"sequenceNumber": 1, "enqueuedTime": "2026-01-01"}}},
            "at '/consumer/startPosition': maxProperties: got 2, want 1",
        ),
        ({"timeouts": {"releaseSeconds": -1}}, "/timeouts/releaseSeconds"),
        # `ehb consume --release-timeout 0` is refused: the pods never started.
        (
            {"timeouts": {"releaseSeconds": 0}},
            "at '/timeouts/releaseSeconds': minimum: got 0, want 1",
        ),
        # The API server refused it at install, after the Secrets and the Role were applied.
        ({"consumer": {"name": "Orders"}}, "at '/consumer/name': 'Orders' does not match"),
        (
            {"consumer": {"eventHub": {"credentials": {"workloadIdentity": {"tenantId": "t"}}}}},
            "at '/consumer/eventHub/credentials/workloadIdentity': additional properties "
            "'tenantId' not allowed",
        ),
        ({"logVerbosity": 3}, "/logVerbosity"),
        # Helm applies without strict field validation: the API server would drop a misspelt
        # field without a word, and a GitOps tool would show it out of sync for ever.
        (
            {"consumer": {"balancing": {"intervalSecond": 10}}},
            "at '/consumer/balancing': additional properties 'intervalSecond' not allowed",
        ),
        (
            {"consumer": {"processing": {"maxAttempt": 3}}},
            "at '/consumer/processing': additional properties 'maxAttempt' not allowed",
        ),
        (
            {"consumer": {"balancing": {"intervalSeconds": 0}}},
            "/consumer/balancing/intervalSeconds",
        ),
        ({"consumer": {"balancing": {"weighting": "lags"}}}, "/consumer/balancing/weighting"),
        ({"consumer": {"processing": {"onFailure": "retry"}}}, "/consumer/processing/onFailure"),
        # What the CRD refuses, refused before anything is applied: a Deployment mounting a
        # key no Secret can hold was admitted, and its pods never started.
        (
            {"consumer": {"eventHub": {"credentials": {"connectionStringSecretRef": BAD_NAME}}}},
            "at '/consumer/eventHub/credentials/connectionStringSecretRef/name'",
        ),
        (
            {
                "consumer": {
                    "checkpointStore": {"credentials": {"connectionStringSecretRef": BAD_KEY}}
                }
            },
            "at '/consumer/checkpointStore/credentials/connectionStringSecretRef/key'",
        ),
        ({"consumer": {"eventHub": {"name": "orders/eu"}}}, "at '/consumer/eventHub/name'"),
        (
            {"consumer": {"eventHub": {"consumerGroup": "$analytics"}}},
            "at '/consumer/eventHub/consumerGroup'",
        ),
        (
            {"consumer": {"eventHub": {"consumerGroup": "a" * 51}}},
            "at '/consumer/eventHub/consumerGroup'",
        ),
        ({"resources": {"limits": {"memory": "2G "}}}, "at '/resources/limits/memory'"),
        ({"resources": {"requests": {"cpu": "2K"}}}, "at '/resources/requests/cpu'"),
        ({"resources": {"limits": {"cpu": -0.5}}}, "at '/resources/limits/cpu'"),
        ({"resources": {"request": {"cpu": "1"}}}, "'request' not allowed"),
    ],
)
def test_the_values_schema_rejects_mistakes(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(charts.HelmError, match="don't meet the specifications") as e:
        render(values)
    assert complaint in str(e.value)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("eventHub", "fullyQualifiedNamespace"), "127.0.0.1:65535"),
        (("eventHub", "fullyQualifiedNamespace"), "Shop-1.servicebus.windows.net"),
        (("eventHub", "name"), "Orders.v2_eu-1"),
        (("eventHub", "consumerGroup"), "$default"),
        (("eventHub", "consumerGroup"), "Analytics.v2_eu-1"),
        (("checkpointStore", "accountUrl"), "https://shop.blob.core.windows.net:443/"),
        (
            ("eventHub", "credentials", "connectionStringSecretRef"),
            {"name": "a.b-c", "key": "K_.-"},
        ),
    ],
    ids=str,
)
def test_a_value_the_crd_takes_renders(path: tuple[str, ...], value: Any) -> None:
    values: dict[str, Any] = {}
    node = values.setdefault("consumer", {})
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    (consumer,) = render(values)["EventHubConsumer"]
    assert crd_rules.failures(consumer) == []


def crd_spec_property(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = crd_rules.SCHEMA["properties"]["spec"]["properties"][name]
    return schema


@pytest.mark.parametrize("section", ["balancing", "processing"])
def test_the_values_schema_holds_the_crds_fields_and_bounds(section: str) -> None:
    """consumer.balancing and consumer.processing become the spec's as they are: the values
    schema knows the CRD's fields, types, bounds and words, and no other field."""
    chart = json.loads((CHART_DIR / "values.schema.json").read_text())
    given = chart["properties"]["consumer"]["properties"][section]
    crd = crd_spec_property(section)
    assert given["additionalProperties"] is False
    assert given["properties"].keys() == crd["properties"].keys()
    for name, field in crd["properties"].items():
        for key in ("type", "minimum", "maximum", "enum"):
            assert given["properties"][name].get(key) == field.get(key), f"{section}.{name}.{key}"


@pytest.mark.parametrize(
    "name", ["checkpoints", "order-checkpoints", "abc", "a" * 63, "0-9"], ids=str
)
def test_a_container_name_the_crd_takes_renders(name: str) -> None:
    (consumer,) = render({"consumer": {"checkpointStore": {"containerName": name}}})[
        "EventHubConsumer"
    ]
    assert crd_rules.failures(consumer) == []


def test_keda_owns_the_replicas_and_scales_on_the_operators_figure() -> None:
    docs = render(loading.load_values(CHART_DIR / "ci" / "keda-values.yaml"))
    (deployment,) = docs["Deployment"]
    assert "replicas" not in deployment["spec"]
    (scaled,) = docs["ScaledObject"]
    (consumer,) = docs["EventHubConsumer"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["query"] == (
        f'max(ehb_recommended_replicas{{namespace="{NAMESPACE}", '
        f'consumer="{consumer["metadata"]["name"]}"}})'
    )
    # No figure (the operator down, or not scraped) must not read as 0 pods: KEDA's default
    # reads an empty answer as 0, and the HPA scales in to minReplicas.
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    assert args_value(container(docs)["args"], "--log-format") == "json"


def test_spark_mode_gets_its_flags_and_its_volume() -> None:
    docs = render(loading.load_values(CHART_DIR / "ci" / "spark-values.yaml"))
    found = container(docs)
    assert "--spark" in found["args"]
    assert "--spark-master=local[2]" in found["args"]
    assert "--spark-conf=spark.sql.shuffle.partitions=4" in found["args"]
    assert {m["mountPath"] for m in found["volumeMounts"]} == {
        "/tmp",
        "/var/lib/ehb",
        "/var/run/secrets/eventhub-balancer/eventhub",
        "/var/run/secrets/eventhub-balancer/checkpoint-store",
    }


#: Masters ``ehb consume --spark-master`` takes and refuses (spark/flags.py), and the ones a
#: values file gets wrong: the chart must agree with the pod on each.
MASTERS = [
    "local",
    "local[2]",
    "local[*]",
    "local[4,2]",
    "local-cluster[2,1,1024]",
    "spark://master:7077",
    "spark://a:7077,b:7077",
    "yarn",
    "k8s://https://kubernetes.default.svc:443",
    " local[2] ",
    "sc://spark-connect:15002",
    "local[0]",
    "local[two]",
    "locals",
    "spark://master",
    "spark:/master:7077",
    "master:7077",
    "spark master",
    "1yarn",
]


#: Spark Connect URLs ``ehb consume --spark-remote`` takes and refuses, past the schema's
#: ``sc://`` prefix.
REMOTES = [
    "sc://spark-connect:15002",
    "sc://spark-connect",
    "sc://host:",
    "sc://u@host:1",
    "sc://[::1]:15002",
    "sc://host:15002/",
    "sc://host:443/;use_ssl=true;token=secret",
    "sc://host:15002 ",
    "sc://:15002",
    "sc://host:99999",
    "sc://host:port",
    "sc://host:15002/spark",
    "sc://host:15002?x=1",
    "sc://host:15002;token=secret/x",
]


@pytest.mark.parametrize(
    ("key", "url"), [("master", m) for m in MASTERS] + [("remote", r) for r in REMOTES]
)
def test_the_chart_refuses_the_spark_url_the_pod_would(key: str, url: str) -> None:
    """A master or Connect URL the pod refuses at its start fails the install instead, with
    the reason the pod would give, and no parameter (a token, maybe); one it takes renders as
    it is, trimmed."""
    check = {"master": flags.validate_master, "remote": flags.parse_remote}[key]
    values = {"spark": {"enabled": True, key: url}}
    try:
        check(url)
    except errors.InvalidInput as refused:
        reason = str(refused).split("' ", 1)[1].split(":")[0]
        with pytest.raises(charts.HelmError, match=rf"spark\.{key}: ") as failed:
            render(values)
        assert reason in str(failed.value)
        assert "secret" not in str(failed.value)
    else:
        assert f"--spark-{key}={url.strip()}" in container(render(values))["args"]


def test_a_spark_master_with_a_connect_server_is_refused_at_install() -> None:
    values = {"spark": {"enabled": True, "master": "local[2]", "remote": "sc://spark:15002"}}
    with pytest.raises(charts.HelmError, match=r"spark\.master goes without spark\.remote"):
        render(values)


def test_a_blank_spark_master_leaves_the_pods_default() -> None:
    args = container(render({"spark": {"enabled": True, "master": "  "}}))["args"]
    assert not [arg for arg in args if arg.startswith("--spark-master")]


def test_spark_settings_and_handler_paths_reach_the_pod_as_written() -> None:
    """Unquoted, a ' #' cut a value short and a ': ' made the argument a mapping; a values
    file's whole number came as 1.34217728e+08, which Spark cannot read."""
    values = {
        "handlerPath": ["/opt/handlers #2"],
        "spark": {
            "enabled": True,
            "master": "spark://master:7077",
            "conf": {
                "spark.driver.extraJavaOptions": "-Dlog4j2.level=WARN #quiet",
                "spark.app.note": "orders: eu",
                "spark.sql.files.maxPartitionBytes": 134217728,
                "spark.memory.fraction": 0.5,
                "spark.ui.enabled": False,
            },
        },
    }
    args = container(render(values))["args"]
    assert "--handler-path=/opt/handlers #2" in args
    assert {arg for arg in args if arg.startswith("--spark-conf=")} == {
        "--spark-conf=spark.driver.extraJavaOptions=-Dlog4j2.level=WARN #quiet",
        "--spark-conf=spark.app.note=orders: eu",
        "--spark-conf=spark.sql.files.maxPartitionBytes=134217728",
        "--spark-conf=spark.memory.fraction=0.5",
        "--spark-conf=spark.ui.enabled=false",
    }
    assert cli.build_parser().parse_args(args).spark_conf == [
        arg.removeprefix("--spark-conf=") for arg in args if arg.startswith("--spark-conf=")
    ]


def test_workload_identity_labels_the_pods_and_annotates_the_account() -> None:
    docs = render(loading.load_values(CHART_DIR / "ci" / "workload-identity-values.yaml"))
    (account,) = docs["ServiceAccount"]
    assert "azure.workload.identity/client-id" in account["metadata"]["annotations"]
    (deployment,) = docs["Deployment"]
    assert (
        deployment["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"]
        == "true"
    )
    (consumer,) = docs["EventHubConsumer"]
    assert consumer["metadata"]["name"] == "orders"
    assert consumer["spec"]["balancing"] == {"handoffTimeoutSeconds": 60, "weighting": "lag"}


@pytest.mark.parametrize("verbosity", [0, 1, 2])
def test_log_verbosity_is_ehbs_verbose_flag(verbosity: int) -> None:
    args = container(render({"logVerbosity": verbosity}))["args"]
    assert cli.build_parser().parse_args(args).verbose == verbosity


def test_the_old_name_verbosity_fails_with_the_new_one() -> None:
    """The operator chart says logVerbosity; the consumer chart says the same, and a values
    file written for the old name gets told, rather than logging quietly at 0."""
    with pytest.raises(charts.HelmError, match="verbosity was renamed logVerbosity"):
        render({"verbosity": 1})


def test_the_podmonitor_scrapes_the_pods_metrics_port() -> None:
    docs = render(loading.load_values(CHART_DIR / "ci" / "podmonitor-values.yaml"))
    (monitor,) = docs["PodMonitor"]
    (deployment,) = docs["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"] for p in container(docs)["ports"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    assert endpoint["path"] == "/metrics"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "PodMonitor" not in render()


def test_the_readme_names_every_value() -> None:
    """The chart's README keeps in step with values.yaml: each top-level value is in its table."""
    readme = (CHART_DIR / "README.md").read_text()
    missing = [k for k in charts.chart_values(CHART_DIR) if f"`{k}`" not in readme]
    assert missing == []


def test_a_new_chart_version_alone_restarts_no_consumer_pod(tmp_path: Path) -> None:
    """A chart upgrade that changes nothing a pod runs leaves the pod template as it was: a
    changed template rolls every consumer pod, and every partition moves by hand-off once."""
    bumped = tmp_path / "eventhub-consumer"
    shutil.copytree(CHART_DIR, bumped)
    chart_yaml = bumped / "Chart.yaml"
    chart = yaml.safe_load(chart_yaml.read_text())
    chart["version"] = chart["appVersion"] = "99.0.0"
    chart_yaml.write_text(yaml.safe_dump(chart))
    pinned = merged(REQUIRED, {"image": {"tag": "1.0.0"}})

    def pod_template(chart_dir: Path) -> dict[str, Any]:
        rendered = charts.render(chart_dir, pinned, name="orders", namespace=NAMESPACE)
        (deployment,) = [d for d in charts.documents(rendered) if d["kind"] == "Deployment"]
        template: dict[str, Any] = deployment["spec"]["template"]
        return template

    assert pod_template(bumped) == pod_template(CHART_DIR)


def test_consumer_paused_sets_the_spec_only_when_true() -> None:
    """``consumer.paused`` is the GitOps way to pause (docs/operations.md, "Pausing a
    consumer"). False writes no field, so that a pause patched onto the object by hand is kept
    by an upgrade that does not set it."""
    (paused,) = render({"consumer": {"paused": True}})["EventHubConsumer"]
    assert paused["spec"]["paused"] is True
    assert crd_rules.failures(paused) == []
    (default,) = render()["EventHubConsumer"]
    assert "paused" not in default["spec"]
    (unpaused,) = render({"consumer": {"paused": False}})["EventHubConsumer"]
    assert "paused" not in unpaused["spec"]
    with pytest.raises(charts.HelmError, match="at '/consumer/paused'"):
        render({"consumer": {"paused": "yes"}})
