"""What a consumer needs from the local stack before it can run: `ehb local up --consumer`.

A newcomer pointing the operator at the local stack had to work out the Secrets holding the
emulator's and Azurite's connection strings, the emulator's ``host:port`` as the Event Hubs
namespace, ``--allow-development-endpoints``, and the checkpoint container, which no ``ehb``
command created. `prepare` does all of it for ``NAMESPACE/NAME``: the namespace, the two
Secrets under the names `examples/orders/values.yaml` and the manifests use, and the
container; `custom_resource` and `operator_command` are what to apply and run next.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack import stacks
from eventhub_balancer_devstack.kube import objectmetas
from eventhub_balancer_devstack.scenarios import systems

#: The Secrets' names and key, as the example's values and manifests/examples/ name them.
EVENTHUB_SECRET = "{name}-eh"
BLOB_SECRET = "{name}-blob"
SECRET_KEY = "connectionString"
#: The checkpoint container the example's values name.
CONTAINER = "checkpoints"


#: The most characters an Event Hubs consumer group name has.
CONSUMER_GROUP_MAX = 50


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConsumerSetup:
    namespace: str
    name: str
    hub: str
    #: Its own group when another consumer of the stack reads the same hub (`parse_all`).
    consumer_group: str = specs.DEFAULT_CONSUMER_GROUP

    @property
    def eventhub_secret(self) -> str:
        return EVENTHUB_SECRET.format(name=self.name)

    @property
    def blob_secret(self) -> str:
        return BLOB_SECRET.format(name=self.name)


def parse(value: str, hubs: dict[str, int]) -> ConsumerSetup:
    """``--consumer shop/orders`` -> the setup; its hub is NAME when the stack has one of that
    name, else the first hub."""
    namespace, slash, name = value.partition("/")
    if not slash or not namespace or not name:
        raise errors.InvalidInput("--consumer", f"{value!r}: give NAMESPACE/NAME, e.g. shop/orders")
    # Said before anything starts: the local API refused them only once the stack was up, in
    # its own stack trace, and kubectl the EventHubConsumer printed for them.
    if objectmetas.label_problems(namespace):
        raise errors.InvalidInput(
            "--consumer",
            f"{value!r}: the namespace {namespace!r} must be a lowercase RFC 1123 label "
            "(a-z, 0-9 and '-', at most 63 characters, e.g. shop)",
        )
    # The name is also the value of the pods' label ``app`` the resource selects: 63 at most.
    if objectmetas.subdomain_problems(name) or len(name) > objectmetas.LABEL_PART_MAX:
        raise errors.InvalidInput(
            "--consumer",
            f"{value!r}: the name {name!r} must be a lowercase RFC 1123 name "
            f"(a-z, 0-9, '-' and '.', at most {objectmetas.LABEL_PART_MAX} characters, "
            "e.g. orders)",
        )
    hub = name if name in hubs else next(iter(hubs))
    return ConsumerSetup(namespace=namespace, name=name, hub=hub)


def parse_all(values: list[str], hubs: dict[str, int]) -> list[ConsumerSetup]:
    """Every ``--consumer``, each on a checkpoint location of its own.

    Consumers of one hub in one consumer group share its checkpoints, and their epoch
    receivers take partitions from each other: two ``--consumer`` on one hub (``shop/orders``
    and ``lab/orders``, or ``shop/billing`` on the first hub) fought over it, and the operator
    could not tell, their Secrets being different. So the first on a hub reads ``$Default``,
    as a single one does, and each other one a group of its own, named after it, as separate
    applications of one Event Hub do."""
    setups: list[ConsumerSetup] = []
    for value in values:
        setup = parse(value, hubs)
        if any((s.namespace, s.name) == (setup.namespace, setup.name) for s in setups):
            raise errors.InvalidInput("--consumer", f"{value!r} is given twice: give it once")
        if any(s.hub == setup.hub for s in setups):
            setup = dataclasses.replace(setup, consumer_group=own_group(setup))
        setups.append(setup)
    return setups


def own_group(setup: ConsumerSetup) -> str:
    """``NAMESPACE.NAME``, cut to a consumer group's 50 characters with a digest of the whole
    kept, so that two long names stay two groups."""
    group = f"{setup.namespace}.{setup.name}"
    if len(group) <= CONSUMER_GROUP_MAX:
        return group
    digest = hashlib.sha256(group.encode()).hexdigest()[:8]
    return f"{group[: CONSUMER_GROUP_MAX - 9].rstrip('.-')}-{digest}"


def _secret(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "data": {SECRET_KEY: base64.b64encode(value.encode()).decode()},
    }


def prepare(stack: stacks.LocalStack, setup: ConsumerSetup) -> None:
    """The namespace, both Secrets (replaced if they exist) and the checkpoint container."""
    kube = stack.kube
    for name, value in (
        (setup.eventhub_secret, stack.eventhubs_connection_string),
        (setup.blob_secret, stack.blob_connection_string),
    ):
        if kube.get_object("v1/secrets", name, namespace=setup.namespace) is not None:
            kube.delete_object("v1/secrets", name, namespace=setup.namespace)
        kube.create_object("v1/secrets", _secret(name, value), namespace=setup.namespace)
    if setup.consumer_group != specs.DEFAULT_CONSUMER_GROUP:
        stack.eventhubs.create_consumer_group(setup.hub, setup.consumer_group)
    asyncio.run(systems.ensure_container(stack.blob_connection_string, CONTAINER))


def custom_resource(stack: stacks.LocalStack, setup: ConsumerSetup) -> dict[str, Any]:
    """An EventHubConsumer over the prepared Secrets, selecting pods ``app=NAME``."""
    return {
        "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
        "kind": specs.KIND,
        "metadata": {"name": setup.name, "namespace": setup.namespace},
        "spec": {
            "eventHub": {
                "fullyQualifiedNamespace": stack.fully_qualified_namespace,
                "name": setup.hub,
                "consumerGroup": setup.consumer_group,
                "credentials": {
                    "connectionStringSecretRef": {"name": setup.eventhub_secret, "key": SECRET_KEY}
                },
            },
            "checkpointStore": {
                "containerName": CONTAINER,
                "credentials": {
                    "connectionStringSecretRef": {"name": setup.blob_secret, "key": SECRET_KEY}
                },
            },
            "selector": {"matchLabels": {"app": setup.name}},
            "startPosition": "earliest",
        },
    }


def operator_command(kubeconfig: Path, setups: Sequence[ConsumerSetup]) -> str:
    """How to run one operator for all of them from this shell (the emulators are development
    endpoints on loopback, which the operator refuses unless told). One, not one a consumer:
    a second operator on this machine cannot have the first one's metrics port."""
    namespaces = dict.fromkeys(setup.namespace for setup in setups)
    flags = " ".join(f"--namespace {shlex.quote(ns)}" for ns in namespaces)
    return (
        f"KUBECONFIG={shlex.quote(str(kubeconfig))} ehb operator {flags} --standalone "
        "--allow-development-endpoints"
    )


def write_custom_resource(stack: stacks.LocalStack, setup: ConsumerSetup) -> Path:
    """The CR as a file in the stack's state folder, for ``kubectl apply -f``."""
    path = stack.options.state_dir / f"{setup.namespace}-{setup.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(custom_resource(stack, setup), sort_keys=False))
    return path


def describe(stack: stacks.LocalStack, setups: Sequence[ConsumerSetup]) -> list[str]:
    """What was prepared, what to apply, and the operator to run for all of it, a line each."""
    assert stack.kubeconfig is not None
    lines = []
    for setup in setups:
        path = write_custom_resource(stack, setup)
        lines += [
            f"Consumer {setup.namespace}/{setup.name}: Secrets {setup.eventhub_secret} and "
            f"{setup.blob_secret} (key {SECRET_KEY}), checkpoint container {CONTAINER}, hub "
            f"{setup.hub}, consumer group {setup.consumer_group}",
            f"  kubectl apply -f {path}",
        ]
    if setups:
        lines += [
            "The operator, for all of them:",
            f"  {operator_command(stack.kubeconfig, setups)}",
        ]
    return lines
