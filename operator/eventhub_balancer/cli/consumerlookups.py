"""One EventHubConsumer by namespace and name, for the commands that take a NAME (``ehb
status``, ``ehb checkpoints``, ``ehb deadletters``).

Not found in the namespace asked (``-n``, else the kubeconfig context's), the error says what
to change: the namespaces where a consumer of that name is, when the caller may list them
cluster-wide, or that none has one and how to list the consumers. A list the caller may not
make (RBAC), or that fails, leaves the plain message; one the cluster cannot serve (no CRD)
says to install it (`kubereads`).
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import specs

#: Namespaces named in the message; the rest are counted.
NAMED = 3


async def get_consumer(api: Any, *, namespace: str, name: str) -> dict[str, Any]:
    """The consumer's body; `errors.NotFound` naming where else to look when it is not there."""
    try:
        return dict(await api.get_consumer(namespace=namespace, name=name))
    except errors.NotFound:
        pass
    missing = f"{specs.KIND} {namespace}/{name}: not found in namespace {namespace}"
    try:
        found = await _elsewhere(api, namespace, name)
    except errors.NotFound:
        raise  # the cluster serves no EventHubConsumers: the list's error says so
    except errors.EventHubBalancerError:
        raise errors.NotFound(
            f"{missing}; `ehb status -n NAMESPACE` lists the {specs.KIND}s of a namespace"
        ) from None
    if not found:
        raise errors.NotFound(
            f"{missing}, nor in any other; `ehb status -n {namespace}` lists the "
            f"{specs.KIND}s there, `ehb status -A` those of every namespace"
        )
    raise errors.NotFound(f"{missing}; found in {_namespaces(found)}")


async def none_in(api: Any, namespace: str) -> str:
    """What ``ehb status`` says of a namespace without consumers: where there are some, when
    the caller may list them cluster-wide (else just that there are none here)."""
    plain = f"no {specs.KIND}s found in namespace {namespace}"
    try:
        found = await _elsewhere(api, namespace, None)
    except errors.EventHubBalancerError:
        return plain
    return f"{plain}; found in {_namespaces(found)}" if found else f"{plain}, nor in any other"


async def _elsewhere(api: Any, namespace: str, name: str | None) -> list[str]:
    """The other namespaces with a consumer (named ``name``, or any), from one cluster-wide
    list."""
    everywhere = await api.list_consumers(namespace=None)
    return sorted(
        {
            str(meta.get("namespace"))
            for body in everywhere
            if ((meta := body.get("metadata") or {}).get("name") == name or name is None)
            and meta.get("namespace") != namespace
        }
    )


def _namespaces(found: list[str]) -> str:
    """``namespace shop: pass -n shop``, ``namespaces a and b: pass -n a or -n b``."""
    flags = " or ".join(f"-n {ns}" for ns in found[:NAMED])
    if len(found) == 1:
        return f"namespace {found[0]}: pass {flags}"
    if len(found) <= NAMED:
        listed = ", ".join(found[:-1]) + f" and {found[-1]}"
        return f"namespaces {listed}: pass {flags}"
    listed = ", ".join(found[:NAMED]) + f" and {len(found) - NAMED} more"
    return f"namespaces {listed}: pass {flags} (`ehb status -A` lists them all)"
