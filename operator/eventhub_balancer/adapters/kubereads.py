"""The operator's reads of the Kubernetes API: EventHubConsumers, pods, ConfigMaps, Secrets,
ServiceAccounts (and the TokenRequest, which stores nothing).

Split from `kubeapi` so that the reads, which count no write, stand apart from the writes;
`kubeapi.KubeAPI` adds the writes on top of `KubeReads`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeclients, listings
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.reconciling import conflicts


class KubeReads(kubeclients.KubeClient):
    """Every read of the Kubernetes API; each one counted in ``requests`` (LISTs in ``lists``)."""

    async def get_consumer(self, *, namespace: str, name: str) -> specs.ConsumerBody:
        body: specs.ConsumerBody = await self._call(
            f"EventHubConsumer {namespace}/{name}",
            self._custom.get_namespaced_custom_object,
            group=specs.GROUP,
            version=specs.VERSION,
            namespace=namespace,
            plural=specs.PLURAL,
            name=name,
        )
        return body

    async def list_consumers(self, *, namespace: str | None) -> list[specs.ConsumerBody]:
        try:
            if namespace:
                result = await self._call(
                    f"EventHubConsumers in {namespace}",
                    self._custom.list_namespaced_custom_object,
                    group=specs.GROUP,
                    version=specs.VERSION,
                    namespace=namespace,
                    plural=specs.PLURAL,
                )
            else:
                result = await self._call(
                    "EventHubConsumers",
                    self._custom.list_cluster_custom_object,
                    group=specs.GROUP,
                    version=specs.VERSION,
                    plural=specs.PLURAL,
                )
        except errors.NotFound:
            # A list answers 404 only when the server has no such resource (a namespace
            # without any is an empty list): "not found" read as a wrong namespace.
            raise errors.NotFound(
                f"the cluster at {self.configuration.host} serves no {specs.KIND}s "
                f"({specs.GROUP}/{specs.VERSION}): install the CRD (crds/, or the operator's "
                "chart), or point KUBECONFIG (--kubeconfig) at the cluster that has it"
            ) from None
        items: list[specs.ConsumerBody] = result.get("items", [])
        return items

    async def list_pods(self, *, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self.lists += 1
        result = await self._call(
            f"pods in {namespace} ({label_selector})",
            self._core.list_namespaced_pod,
            namespace=namespace,
            label_selector=label_selector,
        )
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    async def list_configmaps(self, *, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self.lists += 1
        result = await self._call(
            f"configmaps in {namespace} ({label_selector})",
            self._core.list_namespaced_config_map,
            namespace=namespace,
            label_selector=label_selector,
        )
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    async def select_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> list[Mapping[str, Any]]:
        """The pods ``selector`` matches: one LIST (the cache lists only after a watch error)."""
        return list(await self.list_pods(namespace=namespace, label_selector=selector.to_query()))

    async def consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> list[Mapping[str, Any]]:
        """One EventHubConsumer's assignment ConfigMaps: one LIST."""
        return list(
            await self.list_configmaps(
                namespace=namespace, label_selector=configmaps.consumer_selector(consumer)
            )
        )

    async def list_selected_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> listings.Listing:
        """The pods ``selector`` matches, with the listing's own resourceVersion."""
        return await self._listing(
            f"pods in {namespace} ({selector.to_query()})",
            self._core.list_namespaced_pod,
            namespace=namespace,
            label_selector=selector.to_query(),
        )

    async def list_consumer_configmaps(self, *, namespace: str, consumer: str) -> listings.Listing:
        """One EventHubConsumer's ConfigMaps, with the listing's own resourceVersion."""
        selector = configmaps.consumer_selector(consumer)
        return await self._listing(
            f"configmaps in {namespace} ({selector})",
            self._core.list_namespaced_config_map,
            namespace=namespace,
            label_selector=selector,
        )

    async def list_managed_configmaps(self, *, namespace: str) -> listings.Listing:
        """Every ConfigMap the operator manages in ``namespace``, with the listing's own
        resourceVersion (the relisting's, `handlers.cache.relisting`)."""
        return await self._listing(
            f"configmaps in {namespace} ({configmaps.MANAGED_SELECTOR})",
            self._core.list_namespaced_config_map,
            namespace=namespace,
            label_selector=configmaps.MANAGED_SELECTOR,
        )

    async def _listing(
        self, what: str, call: Callable[..., Any], **kwargs: Any
    ) -> listings.Listing:
        self.lists += 1
        result = await self._call(what, call, **kwargs)
        return listings.Listing(
            items=tuple(result.get("items", [])), metadata=dict(result.get("metadata") or {})
        )

    async def read_configmap(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        """One ConfigMap as the API server has it now; None when it is gone."""
        try:
            body: dict[str, Any] = await self._call(
                f"ConfigMap {namespace}/{name}",
                self._core.read_namespaced_config_map,
                namespace=namespace,
                name=name,
            )
        except errors.NotFound:
            return None
        return body

    def forget_secret(self, *, namespace: str, name: str) -> None:
        """Nothing to forget: this adapter reads every Secret afresh (the cache keeps them:
        `handlers.cache.serving`)."""

    def stamp(self, *, namespace: str, name: str) -> Hashable | None:
        """None: no watch tells this adapter what changed, so no decision is skipped."""
        return None

    def peers(self) -> tuple[conflicts.Peer, ...]:
        """None known: the other EventHubConsumers come from the watch (`handlers.cache`)."""
        return ()

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str:
        """One value of a Secret. It goes to the SDK only; never log or store it."""
        try:
            secret = await self._call(
                f"Secret {namespace}/{name}",
                self._core.read_namespaced_secret,
                namespace=namespace,
                name=name,
            )
        except errors.NotFound as e:
            raise errors.SecretNotFound(
                namespace=namespace, name=name, key=key, missing_key=False
            ) from e
        except errors.Forbidden as e:
            # The install grants Secrets only in namespaces that opted in (docs/install.md).
            raise errors.SecretForbidden(
                f"Secret {namespace}/{name}: reading it is forbidden (403); the operator reads "
                f"Secrets only in namespaces that opted in: bind the ClusterRole "
                f"eventhub-balancer-tenant to it in {namespace} (chart value "
                "tenantNamespaces, or kubectl create rolebinding as docs/install.md shows)"
            ) from e
        data = secret.get("data") or {}
        string_data = secret.get("stringData") or {}
        if key in data:
            try:
                return base64.b64decode(data[key]).decode()
            except (ValueError, UnicodeDecodeError) as e:
                raise errors.ConfigurationError(
                    f"Secret {namespace}/{name} key {key!r} is not base64-encoded UTF-8 text"
                ) from e
        if key in string_data:  # only on API servers that do not fold stringData into data
            return str(string_data[key])
        raise errors.SecretNotFound(namespace=namespace, name=name, key=key, missing_key=True)

    async def read_service_account(self, *, namespace: str, name: str) -> dict[str, Any]:
        """A ServiceAccount, for its workload-identity annotations (`tenantidentities`)."""
        body: dict[str, Any] = await self._call(
            f"ServiceAccount {namespace}/{name}",
            self._core.read_namespaced_service_account,
            namespace=namespace,
            name=name,
        )
        return body

    async def request_service_account_token(
        self, *, namespace: str, name: str, audience: str, expiration_seconds: int
    ) -> dict[str, Any]:
        """The ``status`` of a TokenRequest for the ServiceAccount: ``token`` and
        ``expirationTimestamp``. The token is a credential: it goes to the identity provider
        only; never log or store it. Not counted in ``writes``: nothing is stored."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": expiration_seconds},
        }
        answer: dict[str, Any] = await self._call(
            f"TokenRequest for ServiceAccount {namespace}/{name}",
            self._core.create_namespaced_service_account_token,
            namespace=namespace,
            name=name,
            body=body,
        )
        status: dict[str, Any] = answer.get("status") or {}
        return status
