"""The EventHubConsumer an admin's command acts on, read as the operator reads it.

``ehb checkpoints list|export|import|reset NAME`` and ``ehb deadletters ... NAME`` share this:
NAME and ``-n``, the CR and the identity it declares for each service it touches
(`actingidentities`), the endpoint check on the very values the SDK gets (`allowedendpoints`),
the refusal unless the consumer is paused, and the clients built from all that. No module here
defines a command.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from eventhub_balancer.cli import actingidentities, allowedendpoints, consumerlookups, flagtypes
from eventhub_balancer.contracts import specs

if TYPE_CHECKING:
    from eventhub_balancer.adapters import eventhubs, receiving
    from eventhub_balancer.contracts import endpoints

#: How to pause, in the refusal of a reset or import (like Kafka's, which needs an idle group).
PAUSE_HINT = (
    "kubectl patch eventhubconsumer {name} -n {namespace} --type merge "
    """-p '{{"spec":{{"paused":true}}}}'"""
)


def add_arguments(parser: argparse.ArgumentParser, *, name: bool = True) -> None:
    """NAME, -n and --kubeconfig, whose identity acts, and where credentials may go."""
    if name:
        parser.add_argument(
            "name", metavar="NAME", type=flagtypes.consumer_name, help="the EventHubConsumer"
        )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        type=flagtypes.namespace_name,
        help="its namespace (default: the kubeconfig context's, as kubectl)",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG)")
    actingidentities.add_arguments(parser)
    allowedendpoints.add_arguments(parser)


def refuse_malformed(
    connection_string: str | None, problem_of: Callable[[str], str | None], *, source: str
) -> None:
    """Refuse a connection string that can never work, saying where it came from (a flag, a
    variable, ``Secret ns/name, key 'k'``), what is wrong and what to write; never the value.

    The endpoint check would refuse it too, but as ``host '' is not allowed``."""
    from eventhub_balancer import errors

    problem = None if connection_string is None else problem_of(connection_string)
    if problem is not None:
        raise errors.InvalidInput(source, problem)


def consumer_namespace(args: argparse.Namespace) -> str:
    """The namespace of NAME: ``-n``, else the kubeconfig context's."""
    from eventhub_balancer.cli import kubecontexts

    return kubecontexts.namespace_of(namespace=args.namespace, kubeconfig=args.kubeconfig)


def require_paused(body: Mapping[str, Any]) -> None:
    """Refuse unless the consumer is paused and the operator says every partition is released.

    ``spec.paused`` alone is not enough: until the operator has revoked every partition by
    hand-off, pods still checkpoint, and one of them could write after the reset.
    """
    from eventhub_balancer import errors
    from eventhub_balancer.contracts import conditions

    meta = body.get("metadata") or {}
    name, namespace = meta.get("name", "NAME"), meta.get("namespace", "default")
    how = PAUSE_HINT.format(name=name, namespace=namespace)
    if (body.get("spec") or {}).get("paused") is not True:
        raise errors.InvalidInput(
            "spec.paused",
            f"EventHubConsumer {namespace}/{name} is not paused; checkpoints are only moved "
            f"while no pod consumes. Pause it first: {how}",
        )
    found = conditions.find((body.get("status") or {}).get("conditions"), conditions.PAUSED)
    generation, observed = meta.get("generation"), (found or {}).get("observedGeneration")
    if found is not None and None not in (generation, observed) and generation != observed:
        found = None  # said of an older spec: the operator has not seen this one yet
    if found is None or found.get("status") != "True":
        state = "missing" if found is None else f"{found.get('status')} ({found.get('reason')})"
        raise errors.InvalidInput(
            "status.conditions[Paused]",
            f"EventHubConsumer {namespace}/{name} has spec.paused but its Paused condition is "
            f"{state}: the operator has not yet released every partition. Wait until "
            f"`kubectl get ehc {name} -n {namespace}` shows it Paused, then run this again",
        )


@dataclasses.dataclass(frozen=True)
class ConsumerTarget:
    """An EventHubConsumer read from the cluster, with how each service it touches is reached
    (no logging: the connection strings are secrets)."""

    body: dict[str, Any]
    spec: specs.ConsumerSpec
    store: actingidentities.Acting
    #: None: the command does not touch the Event Hub
    hub: actingidentities.Acting | None = None

    @property
    def qualified_name(self) -> str:
        meta = self.body.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"

    @property
    def status_epochs(self) -> Mapping[str, Any]:
        epochs = (self.body.get("status") or {}).get("epochs")
        return epochs if isinstance(epochs, Mapping) else {}


async def read_consumer(
    api: Any,
    args: argparse.Namespace,
    *,
    namespace: str,
    name: str,
    eventhub: bool = True,
    runner_store: actingidentities.RunnerCredential | None = None,
    runner_hub: actingidentities.RunnerCredential | None = None,
) -> ConsumerTarget:
    """The CR and how its checkpoint store (and with ``eventhub`` its Event Hub) are reached.

    Each service is checked against the allow-list (the operator's flags, `allowedendpoints`)
    on the values its client will get, and gets the identity the CR declares
    (`actingidentities.resolve`, or the runner's credential where a binding allows it); a
    refusal names what to change, before any credential exists.
    """
    body = await consumerlookups.get_consumer(api, namespace=namespace, name=name)
    spec = specs.parse_spec(body.get("spec") or {})
    target = ConsumerTarget(
        body=body,
        spec=spec,
        store=await _reach(
            api, args, spec, name, namespace, actingidentities.checkpoint_store(spec), runner_store
        ),
    )
    return await with_hub(api, args, target, runner=runner_hub) if eventhub else target


async def with_hub(
    api: Any,
    args: argparse.Namespace,
    target: ConsumerTarget,
    *,
    runner: actingidentities.RunnerCredential | None = None,
) -> ConsumerTarget:
    """``target`` with how its Event Hub is reached, checked as `read_consumer` checks it: for
    a command that reads the hub only when it can (``ehb checkpoints list``)."""
    meta = target.body.get("metadata") or {}
    hub = await _reach(
        api,
        args,
        target.spec,
        str(meta.get("name")),
        str(meta.get("namespace")),
        actingidentities.event_hub(target.spec),
        runner,
    )
    return dataclasses.replace(target, hub=hub)


async def _reach(
    api: Any,
    args: argparse.Namespace,
    spec: specs.ConsumerSpec,
    name: str,
    namespace: str,
    service: actingidentities.Service,
    runner: actingidentities.RunnerCredential | None,
) -> actingidentities.Acting:
    allowed = allowedendpoints.policy(args)
    if runner is None and service.credentials.secret_ref is None:
        # The CR's own host, before a TokenRequest or the runner's identity comes near it.
        _check(allowed, service, spec, connection_string=None, account_url=service.account_url)
    acting = await actingidentities.resolve(
        api, args, consumer=name, namespace=namespace, spec=spec, service=service, runner=runner
    )
    _check(
        allowed,
        service,
        spec,
        connection_string=acting.connection_string,
        account_url=acting.account_url,
    )
    return acting


def _check(
    allowed: endpoints.EndpointPolicy,
    service: actingidentities.Service,
    spec: specs.ConsumerSpec,
    *,
    connection_string: str | None,
    account_url: str | None,
) -> None:
    if service.field == "spec.checkpointStore":
        allowed.check_blob(
            account_url=None if connection_string else account_url,
            connection_string=connection_string,
        )
    else:
        allowed.check_eventhub(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            connection_string=connection_string,
        )


def open_store(target: ConsumerTarget) -> Any:
    """The checkpoint container of ``target`` (an async context manager), reached as its
    `actingidentities.Acting` says (the credential is closed with the container)."""
    from eventhub_balancer.adapters import blobs

    store = target.store
    return blobs.open_container(
        container_name=target.spec.checkpoint_container,
        connection_string=store.connection_string,
        account_url=None if store.connection_string else store.account_url,
        credential=store.credential(),
    )


def hub_coordinates(target: ConsumerTarget) -> eventhubs.Coordinates:
    """Where ``target``'s Event Hub is and the identity it declares (a producer's)."""
    from eventhub_balancer.adapters import eventhubs

    hub = target.hub
    assert hub is not None, "read_consumer(eventhub=True) reads the hub's identity"
    return eventhubs.Coordinates(
        fully_qualified_namespace=target.spec.fully_qualified_namespace,
        eventhub_name=target.spec.event_hub_name,
        connection_string=hub.connection_string,
        identity=hub.identity,
    )


def hub_address(target: ConsumerTarget) -> receiving.EventHubAddress:
    """Where ``target``'s Event Hub and consumer group are, with the identity it declares (a
    receiver's); the caller closes ``address.credential`` (`close_credential`)."""
    from eventhub_balancer.adapters import receiving

    hub = target.hub
    assert hub is not None, "read_consumer(eventhub=True) reads the hub's identity"
    spec = target.spec
    return receiving.EventHubAddress(
        fully_qualified_namespace=spec.fully_qualified_namespace,
        eventhub_name=spec.event_hub_name,
        consumer_group=spec.consumer_group,
        connection_string=hub.connection_string,
        credential=hub.credential(),
    )


async def close_credential(address: receiving.EventHubAddress) -> None:
    """Close the credential `hub_address` built (none for a connection string)."""
    import contextlib

    if address.credential is not None:
        with contextlib.suppress(Exception):
            await address.credential.close()
