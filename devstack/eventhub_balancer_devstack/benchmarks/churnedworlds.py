"""The world the operator soak (`churning`) churns around the operator: its EventHubConsumer
and pods, joined, drained, deleted and refilled round after round, its ConfigMaps deleted or
overwritten, and EventHubConsumers with pods of their own created and deleted; each step
waited for until the harness's watch shows it balanced."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypedDict

import kubernetes.client

from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.benchmarks import clusterviews

#: The namespace the soak runs in.
NAMESPACE = "soak"
#: The churned EventHubConsumer (and its hub), and its pods' ``app`` label.
CONSUMER = "soak"
APP = "soak"
#: The EventHubConsumers created and deleted: each in turn reads this hub, with pods of its own.
PASSING_HUB = "soak-passing"
PASSING_APP = "soak-passing"
PASSING_PARTITIONS = 4
PASSING_PODS = 2
#: spec.balancing.intervalSeconds, as ``ehb bench operator`` runs it: more cycles per minute.
INTERVAL_SECONDS = 2
#: A ConfigMap is deleted or overwritten every so many rounds, a consumer created and deleted.
CONFIGMAP_EVERY = 2
CONSUMER_EVERY = 5
#: The longest wait for one step of a round (the operator balances within seconds).
STEP_SECONDS = clusters.WAIT_SECONDS
#: How often the harness looks at what its watch delivered: it shares the 2 cores with the
#: operator, so it does not spin.
POLL_SECONDS = 0.05


class Churned(TypedDict):
    """What the soak did to the operator's world."""

    rounds: int
    joined: int
    drained: int
    deleted: int
    configmaps_deleted: int
    configmaps_overwritten: int
    consumers_created: int
    consumers_deleted: int


def consumer_body(name: str, *, hub: str, app: str) -> dict[str, Any]:
    return clusterviews.consumer_body(
        name, hub=hub, app=app, interval=INTERVAL_SECONDS, host="soak.servicebus.windows.net"
    )


def wait(predicate: Callable[[], Any], what: str) -> None:
    clusters.wait_for(predicate, timeout=STEP_SECONDS, what=what, poll=POLL_SECONDS)


class World:
    """The cluster around the operator, as the soak churns it."""

    def __init__(self, api: kubernetes.client.ApiClient, *, partitions: int) -> None:
        self.cluster = clusterviews.Cluster(api, NAMESPACE)
        self.cluster.ensure_namespace()
        self.view = clusterviews.View()
        self.partitions = partitions
        self.members: list[str] = []
        self._serial = itertools.count()
        self.churned: Churned = {
            "rounds": 0,
            "joined": 0,
            "drained": 0,
            "deleted": 0,
            "configmaps_deleted": 0,
            "configmaps_overwritten": 0,
            "consumers_created": 0,
            "consumers_deleted": 0,
        }

    def pod_name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._serial)}"

    def balanced(self) -> bool:
        return self.view.balanced_over(CONSUMER, set(self.members), self.partitions)

    def start(self, pods: int) -> None:
        self.cluster.custom.create_namespaced_custom_object(
            specs.GROUP,
            specs.VERSION,
            NAMESPACE,
            specs.PLURAL,
            consumer_body(CONSUMER, hub=CONSUMER, app=APP),
            _preload_content=False,
        )
        for _ in range(pods):
            name = self.pod_name(APP)
            self.cluster.pod(name, app=APP)
            self.members.append(name)
        wait(self.balanced, "the initial balance")

    def round(self) -> None:
        """A pod joins; the oldest leaves (drained or deleted outright); now and then a
        ConfigMap is deleted or overwritten, and a consumer comes and goes."""
        n = self.churned["rounds"]
        joiner = self.pod_name(APP)
        self.cluster.pod(joiner, app=APP)
        self.members.append(joiner)
        self.churned["joined"] += 1
        wait(self.balanced, f"{joiner} joined")

        leaving = self.members.pop(0)
        if n % 2 == 0:
            self.cluster.terminate(leaving)
            wait(self.balanced, f"{leaving} drained")
            self.cluster.delete_pod(leaving)
            self.churned["drained"] += 1
        else:
            self.cluster.delete_pod(leaving)
            wait(self.balanced, f"{leaving}'s partitions reassigned")
            self.churned["deleted"] += 1
        wait(lambda: leaving not in self.view.pods(CONSUMER), f"{leaving}'s ConfigMap gone")

        if n % CONFIGMAP_EVERY == 0:
            self._rewrite(self.members[-1], delete=n % (2 * CONFIGMAP_EVERY) == 0)
        if n % CONSUMER_EVERY == 0:
            self._passing_consumer(n)
        self.churned["rounds"] += 1

    def _rewrite(self, pod: str, *, delete: bool) -> None:
        """The pod's ConfigMap deleted (a user's mistake) or overwritten with nothing assigned
        (tampering): the operator writes it again."""
        name = configmaps.configmap_name(consumer=CONSUMER, pod=pod)
        core = self.cluster.core
        if delete:
            old: Any = core.read_namespaced_config_map(name, NAMESPACE)
            core.delete_namespaced_config_map(name, NAMESPACE, _preload_content=False)

            def recreated() -> bool:
                try:
                    body: Any = core.read_namespaced_config_map(name, NAMESPACE)
                except kubernetes.client.ApiException as e:
                    if e.status == 404:
                        return False
                    raise
                return bool(body.metadata.uid != old.metadata.uid)

            # The watch may deliver the deletion and the new one together: ask the API.
            wait(recreated, f"{name} deleted and written anew")
            self.churned["configmaps_deleted"] += 1
        else:
            patch = {"data": {configmaps.KEY_PARTITIONS: "{}"}}
            core.patch_namespaced_config_map(name, NAMESPACE, patch, _preload_content=False)

            def repaired() -> bool:
                body: Any = core.read_namespaced_config_map(name, NAMESPACE)
                return (body.data or {}).get(configmaps.KEY_PARTITIONS) != "{}"

            # The watch may deliver the overwrite and the repair together: ask the API.
            wait(repaired, f"{name} overwritten and repaired")
            self.churned["configmaps_overwritten"] += 1
        wait(self.balanced, f"{name} written again")

    def _passing_consumer(self, n: int) -> None:
        """An EventHubConsumer with pods of its own, balanced, then deleted with its pods."""
        name = f"passing-{n}"
        pods = {self.pod_name(PASSING_APP) for _ in range(PASSING_PODS)}
        custom = self.cluster.custom
        custom.create_namespaced_custom_object(
            specs.GROUP,
            specs.VERSION,
            NAMESPACE,
            specs.PLURAL,
            consumer_body(name, hub=PASSING_HUB, app=PASSING_APP),
            _preload_content=False,
        )
        self.churned["consumers_created"] += 1
        for pod in pods:
            self.cluster.pod(pod, app=PASSING_APP)
        wait(
            lambda: self.view.balanced_over(name, pods, PASSING_PARTITIONS),
            f"{name} balanced",
        )
        custom.delete_namespaced_custom_object(
            specs.GROUP, specs.VERSION, NAMESPACE, specs.PLURAL, name, _preload_content=False
        )
        wait(lambda: not self._exists(name), f"{name} deleted")
        self.churned["consumers_deleted"] += 1
        for pod in pods:
            self.cluster.delete_pod(pod)
        wait(lambda: not self.view.pods(name), f"{name}'s ConfigMaps gone")

    def _exists(self, name: str) -> bool:
        try:
            self.cluster.custom.get_namespaced_custom_object(
                specs.GROUP, specs.VERSION, NAMESPACE, specs.PLURAL, name
            )
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


# -- sampling
