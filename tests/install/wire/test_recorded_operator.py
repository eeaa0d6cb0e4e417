"""The operator's real API calls on the local stack against the install's RBAC.

The recording proxy sits between the operator and the local API server; a short scenario
(assign, scale up with hand-offs, a pod deleted, a second consumer read with its own
ServiceAccount's identity) makes the operator do its work, and every recorded request must be
allowed by the ClusterRole of manifests/install/ and of the chart.
Grants the scenario never exercised are reported against a list of those the code needs in
situations the scenario does not reach.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventhub_balancer.adapters import tenantidentities
from eventhub_balancer.contracts import labelselectors, specs
from eventhub_balancer.handlers import kopfwiring, running
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.kube import kubeconfigs
from tests.install import test_rbac_manifests
from tests.support import loading
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for
from tests.support.rbac.authorizing import Authorizer, Subject
from tests.support.rbac.recording import RecordingProxy

OPERATOR = Subject.service_account("eventhub-balancer-system", "eventhub-balancer")
#: Granted for what a short recording may not reach: stale ConfigMaps are deleted only when a
#: pod disappears without its ConfigMap being collected; a ConfigMap is read again by name only
#: after a write of it conflicted (a pod acknowledged meanwhile: a race this run meets now and
#: then); and the CR is read directly (not from the watch cache) only after a cycle's NotFound,
#: to tell whether the CR itself is gone.
NOT_REACHED = {("delete", "configmaps"), ("get", "configmaps"), ("get", "eventhubconsumers")}
#: The metrics' reviews are made only when someone scrapes /metrics (test_metrics_access.py).
NOT_REACHED |= {("create", "tokenreviews"), ("create", "subjectaccessreviews")}
#: The verbs that read a collection.
READS = ("list", "watch")
#: The label the consumer chart's pods carry, which ``--pod-selector`` is documented with.
PART_OF, OURS = labelselectors.CONSUMER_POD_LABEL
CHART_OPERATOR = Subject.service_account(loading.RELEASE_NAMESPACE, "ehb-eventhub-balancer")
#: Where the tenant's token exchange goes: a closed port on loopback, so that it fails at once
#: and nothing leaves the machine (the exchange itself is tests/adapters/wire/
#: test_tenant_identity_exchange.py).
NO_IDENTITY_ENDPOINT = "https://127.0.0.1:9"


def tenant_consumer(stack: Stack, namespace: str) -> None:
    """A consumer whose checkpoint store is read as its own ServiceAccount (``orders-reader``):
    the operator reads the ServiceAccount and requests its token."""
    stack.kube.create_object(
        "v1/serviceaccounts",
        {
            "metadata": {
                "name": "orders-reader",
                "labels": {tenantidentities.OPT_IN_LABEL: tenantidentities.OPT_IN_VALUE},
                "annotations": {
                    tenantidentities.CLIENT_ID_ANNOTATION: "bbbbbbbb-0000-0000-0000-000000000001",
                    tenantidentities.TENANT_ID_ANNOTATION: "11111111-2222-3333-4444-555555555555",
                },
            }
        },
        namespace=namespace,
    )
    spec: dict[str, Any] = {
        "eventHub": {
            "fullyQualifiedNamespace": "shop.servicebus.windows.net",
            "name": "orders",
            "consumerGroup": "audit",
            "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
        },
        "checkpointStore": {
            "containerName": "checkpoints",
            "accountUrl": "https://tenantb.blob.core.windows.net",
            "credentials": {"workloadIdentity": {}},
        },
        "selector": {"matchLabels": {"app": "audit"}},
        "serviceAccountName": "orders-reader",
    }
    stack.kube.create_object(
        clusters.CR,
        {
            "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
            "kind": specs.KIND,
            "metadata": {"name": "audit"},
            "spec": spec,
        },
        namespace=namespace,
    )


class ProxyThread:
    """The recording proxy on its own event loop (the operator's sync client must not share it)."""

    def __init__(self, upstream: str) -> None:
        self.proxy = RecordingProxy(upstream)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(10)
        return self.proxy

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def recorded_stack(operator_stack: Stack, tmp_path: Path) -> Iterator[tuple[Stack, RecordingProxy]]:
    with ProxyThread(operator_stack.kube.url) as proxy:
        operator_stack.kubeconfig = kubeconfigs.write(tmp_path / "proxied", server=proxy.url)
        yield operator_stack, proxy


def test_operator_calls_are_allowed_by_its_roles(
    recorded_stack: tuple[Stack, RecordingProxy], namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, proxy = recorded_stack
    ns = namespace
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", NO_IDENTITY_ENDPOINT)
    stack.secret(ns)
    stack.consumer(ns)
    tenant_consumer(stack, ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}")
    operator = stack.start_operator(clusterwide=True, refresh_seconds=1.0)
    with ConsumerDouble(stack.kube, ns):
        wait_for(lambda: stack.balanced(ns) and len(stack.counts(ns)) == 2, what="2 pods")
        stack.pod(ns, "c-2")
        wait_for(lambda: stack.balanced(ns) and len(stack.counts(ns)) == 3, what="3 pods")
        stack.delete_pod(ns, "c-2")
        wait_for(lambda: stack.balanced(ns) and len(stack.counts(ns)) == 2, what="back to 2")
        wait_for(
            lambda: any(r.subresource == "token" for r in proxy.requests),
            what="the tenant's token requested",
        )
    stack.stop_operator(operator)

    requests = proxy.requests
    assert requests, "the operator made no request through the proxy"
    # Every listing and watch of ConfigMaps asks the API server for the operator's own only
    # (kopf's watch included): the namespaces' other ConfigMaps never reach it.
    configmap_reads = [
        r for r in proxy.recorded if r.info.resource == "configmaps" and r.info.verb in READS
    ]
    assert any(r.info.verb == "watch" for r in configmap_reads)
    for read in configmap_reads:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(read.path_qs).query)
        asked = ",".join(query.get("labelSelector", [])).split(",")
        assert kopfwiring.CONFIGMAPS_SELECTOR in asked, read.path_qs
    # The consumers' namespace opted in, as docs/install.md shows: its Secrets and tokens.
    install = Authorizer(
        [
            *(d.body for d in loading.file_documents(loading.MANIFESTS_DIR / "install")),
            test_rbac_manifests.tenant_opt_in(
                ns, role="eventhub-balancer-tenant", account=test_rbac_manifests.INSTALL_OPERATOR
            ),
        ]
    )
    chart = Authorizer(
        [
            *(d.body for d in loading.rendered(None)),
            test_rbac_manifests.tenant_opt_in(
                ns, role="ehb-eventhub-balancer-tenant", account=test_rbac_manifests.CHART_OPERATOR
            ),
        ]
    )
    assert [r.describe() for r in install.denied(OPERATOR, requests)] == []
    assert [r.describe() for r in chart.denied(CHART_OPERATOR, requests)] == []
    unused = {(a.verb, a.resource) for a in install.unexercised(OPERATOR, requests)}
    assert unused <= NOT_REACHED, f"granted but never used: {sorted(unused - NOT_REACHED)}"


def test_with_a_pod_selector_the_operator_reads_no_other_pod(
    recorded_stack: tuple[Stack, RecordingProxy], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``ehb operator --pod-selector``: every listing and watch of pods asks the API server
    for the selected pods alone (kopf's watch, the relisting, a cycle's reads), a consumer's
    pod without the label is no member, and one that loses it leaves its consumer (the watch
    sends it as deleted) and is back once it carries it again."""
    stack, proxy = recorded_stack
    ns, scope = namespace, labelselectors.CONSUMER_PODS
    caplog.set_level(logging.INFO, logger=running.__name__)
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}", labels={PART_OF: OURS})
    stack.pod(ns, "c-unlabelled")
    stack.pod(ns, "web-0", app="web")
    operator = stack.start_operator(
        namespaces=(ns,), pod_scope=labelselectors.parse_query(scope, field="--pod-selector")
    )
    with ConsumerDouble(stack.kube, ns):
        wait_for(lambda: stack.balanced(ns) and len(stack.counts(ns)) == 2, what="2 pods")

        def label_c1(value: str | None) -> None:
            patch = {"metadata": {"labels": {PART_OF: value}}}
            stack.kube.patch_object("v1/pods", "c-1", patch, namespace=ns)

        def owners() -> list[str]:
            return sorted(pod for pod, owned in stack.counts(ns).items() if owned)

        label_c1(None)
        wait_for(lambda: stack.balanced(ns) and owners() == ["c-0"], what="c-1 out")
        label_c1(OURS)
        wait_for(lambda: stack.balanced(ns) and owners() == ["c-0", "c-1"], what="c-1 back")
        stack.delete_pod(ns, "c-1")
        wait_for(lambda: stack.balanced(ns) and owners() == ["c-0"], what="c-1 deleted")
    stack.stop_operator(operator)
    pod_reads = [r for r in proxy.recorded if r.info.resource == "pods" and r.info.verb in READS]
    assert {r.info.verb for r in pod_reads} >= {"list", "watch"}
    for read in pod_reads:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(read.path_qs).query)
        asked = ",".join(query.get("labelSelector", [])).split(",")
        assert scope in asked, read.path_qs
    # The start says which namespaces it serves, and which of their pods it watches.
    assert f"namespaces served: {ns}" in caplog.messages
    assert f"pods watched: those matching {scope}" in caplog.messages
