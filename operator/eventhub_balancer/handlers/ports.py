"""What the handlers need from the outside world, as Protocols.

The adapters are built by the entry points (``ehb operator``, the benchmarks, the tests) and
handed in, so that a cycle runs against in-memory fakes in unit tests
(``tests/support/fakes.py``) and against a second operator's own clients in peering tests.
The reads a cycle makes every time (the CR, its pods, its ConfigMaps, Secrets) are served from
the watch streams by `caching.CachedKube`, which satisfies `KubePort` over the adapter.
These Protocols are the seams: ``adapters.kubeapi.KubeAPI`` and ``adapters.eventhubs.EventHubs``
satisfy them. Errors cross the seam as `eventhub_balancer.errors` types, whose ``reason`` the
handlers show.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from eventhub_balancer.contracts import specs


class KubePort(Protocol):
    writes: dict[str, int]

    async def get_consumer(self, *, namespace: str, name: str) -> specs.ConsumerBody: ...

    async def select_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> list[Mapping[str, Any]]: ...

    async def consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> list[Mapping[str, Any]]: ...

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str: ...

    def forget_secret(self, *, namespace: str, name: str) -> None:
        """Read the Secret afresh next time: what it held was rejected (or failed)."""

    async def create_configmap(
        self, *, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any]: ...

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]: ...

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None: ...

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Mapping[str, Any] | None: ...

    async def patch_consumer_status(
        self, *, namespace: str, name: str, status: Mapping[str, Any]
    ) -> specs.ConsumerBody: ...

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None: ...


class HubPort(Protocol):
    def cached(self, consumer: str) -> tuple[str, ...] | None: ...

    async def partitions(
        self,
        *,
        consumer: str,
        fully_qualified_namespace: str,
        eventhub_name: str,
        connection_string: str | None,
        client_id: str | None,
        now: float,
    ) -> tuple[tuple[str, ...], bool]: ...

    async def last_sequence_numbers(
        self,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        connection_string: str | None,
        client_id: str | None,
        partitions: list[str],
    ) -> dict[str, int]: ...

    async def checkpoints(
        self,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        consumer_group: str,
        container_name: str,
        connection_string: str | None,
        account_url: str | None,
    ) -> dict[str, tuple[int, int]]: ...
