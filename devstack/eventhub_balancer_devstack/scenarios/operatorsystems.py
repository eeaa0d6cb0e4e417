"""eventhub-balancer as a scenario's system under test: the operator and ``ehb consume`` pods.

`OursSystem` runs the real operator in a thread on the stack's API server, creates the
EventHubConsumer and its Secrets, and has the scenario's kubelet run ``ehb consume`` pods. Its
`Snapshot` is read from the assignment ConfigMaps the operator writes and the generations the
pods acknowledge; what "balanced" means, and what it shares with the SDK's system, is in
``systems.py``.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer.adapters import eventhubs, kubeapi
from eventhub_balancer.contracts import configmaps, podassignments, specs
from eventhub_balancer.handlers import registering, running
from eventhub_balancer_devstack import kubelet, recording
from eventhub_balancer_devstack.scenarios import systems


class OursSystem:
    """eventhub-balancer: the operator (kopf, in a thread) and ``ehb consume`` pods."""

    label = "ours"

    def __init__(
        self,
        site: systems.Site,
        *,
        pod_grace_seconds: int = 20,
        handoff_timeout_seconds: int = specs.DEFAULT_HANDOFF_TIMEOUT_SECONDS,
        handler: str = f"{recording.__name__}:process",
        consume_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        processing: Mapping[str, Any] | None = None,
    ) -> None:
        """``handler``, ``consume_args`` and ``env`` change what the pods run (the chaos run's
        misbehaving handler and its stuck limit); ``processing`` is the CR's
        ``spec.processing`` (the failure policy), left to its defaults when None. The hand-off
        timeout is the product's default, which the pods' default release fits
        (`consumer.releasebudgets`); the chaos run shortens it on purpose."""
        self.site = site
        self.pod_grace_seconds = pod_grace_seconds
        self.handoff_timeout_seconds = handoff_timeout_seconds
        self.handler = handler
        self.consume_args = tuple(consume_args)
        self.env = dict(env or {})
        self.processing = dict(processing) if processing is not None else None
        self.operator: running.OperatorThread | None = None
        self._api: kubeapi.KubeAPI | None = None

    # -- lifecycle

    def start(self) -> None:
        site = self.site
        # Azurite directly: the operator's own checkpoint reads are not what chaos tests.
        site.loop.run(systems.ensure_container(site.stack.blob_connection_string, site.container))
        self._secret("eh", site.eventhubs_connection_string)
        self._secret("blob", site.blob_connection_string)
        site.stack.kube.create_object(systems.CR, self.custom_resource(), namespace=site.namespace)
        self.start_operator()

    def stop(self) -> None:
        self.stop_operator()

    def start_operator(self) -> None:
        """The real operator on the local API server (also after a simulated crash)."""
        api = kubeapi.KubeAPI.from_environment(str(self.site.kubeconfig))
        runtime = registering.Operator(
            kube=api,
            # The hub grows during the scenario: re-read its partitions every cycle (the
            # default is at least every minute).
            hubs=eventhubs.EventHubs(refresh_seconds=self.site.interval_seconds, timeout=3.0),
            connection=api.connection_info,
        )
        options = running.Options(
            namespaces=(self.site.namespace,),
            standalone=True,
            metrics_host="127.0.0.1",
            metrics_port=0,
        )
        try:
            self.operator = running.OperatorThread(runtime, options).start()
        except BaseException:
            api.close()
            raise
        self._api = api

    def stop_operator(self) -> None:
        operator, self.operator = self.operator, None
        if operator is not None:
            operator.stop()
        api, self._api = self._api, None
        if api is not None:
            api.close()

    def attach(self, pods: kubelet.LocalKubelet) -> None:
        return None  # the ConfigMaps say everything

    def up(self, port: int) -> bool:
        return systems.answers_readyz(port, not_yet=systems.NO_ASSIGNMENT_YET)

    # -- objects

    def _secret(self, name: str, value: str) -> None:
        self.site.stack.kube.create_object(
            "v1/secrets",
            {
                "metadata": {"name": name},
                "data": {"cs": base64.b64encode(value.encode()).decode()},
            },
            namespace=self.site.namespace,
        )

    def custom_resource(self) -> dict[str, Any]:
        site = self.site
        body: dict[str, Any] = {
            "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
            "kind": specs.KIND,
            "metadata": {"name": site.consumer},
            "spec": {
                "eventHub": {
                    "fullyQualifiedNamespace": systems.FULLY_QUALIFIED_NAMESPACE,
                    "name": site.hub,
                    "consumerGroup": systems.CONSUMER_GROUP,
                    "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
                },
                "checkpointStore": {
                    "containerName": site.container,
                    "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
                },
                "selector": {"matchLabels": {"app": site.consumer}},
                "startPosition": "earliest",
                "balancing": {
                    "intervalSeconds": site.interval_seconds,
                    "podGraceSeconds": self.pod_grace_seconds,
                    "handoffTimeoutSeconds": self.handoff_timeout_seconds,
                },
            },
        }
        if self.processing is not None:
            body["spec"]["processing"] = dict(self.processing)
        return body

    def template(self) -> kubelet.PodTemplate:
        site = self.site

        def command(name: str, port: int) -> list[str]:
            return [
                sys.executable,
                "-m",
                "eventhub_balancer",
                "-v",
                "consume",
                "--handler",
                self.handler,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--batch-size",
                str(systems.BATCH_SIZE),
                "--max-wait",
                str(systems.MAX_WAIT_S),
                "--shutdown-timeout",
                str(systems.SHUTDOWN_TIMEOUT_S),
                *self.consume_args,
            ]

        return kubelet.PodTemplate(
            name_prefix=site.consumer,
            labels={"app": site.consumer},
            command=command,
            env={**systems.record_env(site), "EHB_CONSUMER": site.consumer, **self.env},
            termination_grace_s=systems.TERMINATION_GRACE_S,
            log_dir=site.log_dir,
        )

    # -- observing

    def status(self) -> dict[str, Any]:
        body = self.site.stack.kube.get_object(
            systems.CR, self.site.consumer, namespace=self.site.namespace
        )
        return dict((body or {}).get("status") or {})

    def snapshot(self, *, members: Sequence[str], ready: frozenset[str]) -> systems.Snapshot:
        """Who holds what, from the assignment ConfigMaps and the pods' acknowledgements."""
        owners: dict[str, str] = {}
        revoking = 0
        pending: list[str] = []
        for cm in self.site.stack.kube.list_objects(
            "v1/configmaps", namespace=self.site.namespace, label_selector=configmaps.LABEL_POD
        ):
            parsed = podassignments.parse_data(cm.get("data") or {})
            if parsed.consumer != self.site.consumer:
                continue
            annotations = cm["metadata"].get("annotations") or {}
            applied = configmaps.parse_applied_generation(annotations)
            if parsed.pod in members and applied != parsed.generation:
                pending.append(parsed.pod)
            for partition, entry in parsed.partitions.items():
                if entry.state == "owned":
                    owners[str(partition)] = parsed.pod
                else:
                    revoking += 1
        return systems.judge(
            partitions=self.site.partitions(),
            members=members,
            ready=ready,
            owners=owners,
            in_flight=revoking,
            pending=pending,
        )
