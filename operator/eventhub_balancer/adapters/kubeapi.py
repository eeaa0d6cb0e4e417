"""The operator's one door to the Kubernetes API (apart from kopf's own watching).

Why the official ``kubernetes`` client, run in a thread pool, rather than aiohttp by hand: it
already handles every way a cluster authenticates (kubeconfig with exec plugins and token
files, in-cluster ServiceAccount tokens that rotate, client certificates), and that is where
home-grown clients break. It is synchronous, so every call runs in a small private executor;
the API server never runs on the operator's loop (the local one has its own thread), so the
client cannot deadlock on it. Bodies come back as plain dicts (``_preload_content=False``), the
same shape as kopf's bodies, so the pure code sees one format.

Writes are minimal by construction: callers pass what they want and the current body; the
adapter PATCHes (JSON merge patch) only a difference, with the resourceVersion read as a
precondition where the pod or a second operator could race us. ``ApiException`` is wrapped
into `errors` types here and nowhere else.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import os
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.reconciling import conflicts

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
#: Seconds for one API request; a hung API server must not hang a cycle.
REQUEST_TIMEOUT = 15.0
#: Threads for blocking API calls: cycles of several consumers run concurrently.
WORKERS = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConnectionInfo:
    """How to reach the API server, for kopf's login handler (same source as this adapter)."""

    server: str
    ca_path: str | None
    insecure: bool
    token: str | None
    certificate_path: str | None
    private_key_path: str | None


def _wrap(e: BaseException, what: str) -> errors.EventHubBalancerError:
    if isinstance(e, kube_exceptions.ApiException):
        status = e.status or 0
        reason = _reason(e)
        if status == 404:
            return errors.NotFound(f"{what}: not found")
        if status == 409:
            return errors.Conflict(f"{what}: conflict ({reason})")
        if status == 403:
            return errors.Forbidden(
                f"{what}: forbidden ({reason}); grant the operator's ServiceAccount access"
            )
        if status == 422 or status == 400:
            return errors.ApiRejected(f"{what}: rejected ({status}: {reason})")
        return errors.ApiUnavailable(f"{what}: API server answered {status} ({reason})")
    return errors.ApiUnavailable(f"{what}: {type(e).__name__}: {e}")


def _reason(e: kube_exceptions.ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
        return str(body.get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


class KubeAPI:
    """Async facade over the sync client; one per operator process (or test)."""

    def __init__(self, configuration: kubernetes.client.Configuration) -> None:
        self._configuration = configuration
        self._client = kubernetes.client.ApiClient(configuration)
        self._core = kubernetes.client.CoreV1Api(self._client)
        self._custom = kubernetes.client.CustomObjectsApi(self._client)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=WORKERS, thread_name_prefix="kubeapi"
        )
        #: API writes by kind, counted for metrics and for the steady-state benchmark.
        self.writes: dict[str, int] = {}
        #: every request made (reads and writes), for the benchmark's requests per cycle
        self.requests = 0
        #: the LISTs among them, for the benchmark's cost of a re-list
        self.lists = 0

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> KubeAPI:
        """In-cluster when there is a ServiceAccount token, else the kubeconfig (or $KUBECONFIG)."""
        configuration = kubernetes.client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            # The path is passed explicitly: the client reads $KUBECONFIG only at import.
            try:
                kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=path, client_configuration=configuration
                )
            except (kubernetes.config.ConfigException, OSError) as e:
                raise errors.ConfigurationError(
                    f"cannot load the kubeconfig {path or '~/.kube/config'}: {e}"
                ) from e
        return cls(configuration)

    @property
    def configuration(self) -> kubernetes.client.Configuration:
        """How this client reaches the API server (another client of the same identity)."""
        return self._configuration

    def connection_info(self) -> ConnectionInfo:
        c = self._configuration
        header = c.api_key.get("authorization") or c.api_key.get("BearerToken")
        token = header.removeprefix("Bearer ").strip() if header else None
        return ConnectionInfo(
            server=c.host,
            ca_path=c.ssl_ca_cert,
            insecure=not c.verify_ssl,
            token=token,
            certificate_path=c.cert_file,
            private_key_path=c.key_file,
        )

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._client.close()  # type: ignore[no-untyped-call]

    async def _call(self, what: str, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        call = functools.partial(fn, _preload_content=False, **kwargs)
        self.requests += 1
        loop = asyncio.get_running_loop()
        try:
            response = await loop.run_in_executor(self._executor, call)
        except (kube_exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            raise _wrap(e, what) from e
        raw = response.data
        return json.loads(raw) if raw else {}

    def _count(self, kind: str) -> None:
        self.writes[kind] = self.writes.get(kind, 0) + 1

    # --- reads ---

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
        """Nothing to forget: this adapter reads every Secret afresh (`caching` keeps them)."""

    def stamp(self, *, namespace: str, name: str) -> Hashable | None:
        """None: no watch tells this adapter what changed, so no decision is skipped."""
        return None

    def peers(self) -> tuple[conflicts.Peer, ...]:
        """None known: the other EventHubConsumers come from the watch (`caching`)."""
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
            raise errors.Forbidden(
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

    # --- writes (each counted) ---

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._count("configmap")
        result: dict[str, Any] = await self._call(
            f"create ConfigMap {namespace}/{body.get('metadata', {}).get('name')}",
            self._core.create_namespaced_config_map,
            namespace=namespace,
            body=dict(body),
        )
        return result

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        """Merge-patch; with ``resource_version`` the write fails (Conflict) if it changed."""
        body = dict(patch)
        if resource_version:
            body["metadata"] = {**body.get("metadata", {}), "resourceVersion": resource_version}
        self._count("configmap")
        result: dict[str, Any] = await self._call(
            f"patch ConfigMap {namespace}/{name}",
            self._core.patch_namespaced_config_map,
            namespace=namespace,
            name=name,
            body=body,
            _content_type=MERGE_PATCH,
        )
        return result

    async def replace_configmap_data(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        generation: str,
        data: Mapping[str, str],
    ) -> dict[str, Any]:
        """A JSON patch whose ``test`` operations are the precondition: the ConfigMap is still
        ``uid`` and its data still at ``generation``; then its data is replaced. A failed test
        (the API server answers 422) is a Conflict."""
        operations = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": f"/data/{configmaps.KEY_GENERATION}", "value": generation},
            {"op": "add", "path": "/data", "value": dict(data)},
        ]
        self._count("configmap")
        what = f"patch ConfigMap {namespace}/{name}"
        try:
            result: dict[str, Any] = await self._call(
                what,
                self._core.patch_namespaced_config_map,
                namespace=namespace,
                name=name,
                body=operations,
                _content_type=JSON_PATCH,
            )
        except errors.ApiRejected as e:
            raise errors.Conflict(f"{what}: conflict (changed since read: {e})") from e
        return result

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None:
        """Delete, guarded by uid so that a re-created namesake survives; gone already is fine."""
        self._count("configmap")
        body: dict[str, Any] = {"preconditions": {"uid": uid}} if uid else {}
        with contextlib.suppress(errors.NotFound):
            await self._call(
                f"delete ConfigMap {namespace}/{name}",
                self._core.delete_namespaced_config_map,
                namespace=namespace,
                name=name,
                body=body,
            )

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any] | None:
        """The pod as patched; None when it is gone (nothing left to annotate)."""
        self._count("pod")
        with contextlib.suppress(errors.NotFound):
            result: dict[str, Any] = await self._call(
                f"annotate Pod {namespace}/{name}",
                self._core.patch_namespaced_pod,
                namespace=namespace,
                name=name,
                body={"metadata": {"annotations": dict(annotations)}},
                _content_type=MERGE_PATCH,
            )
            return result
        return None

    async def patch_consumer_status(
        self,
        *,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> specs.ConsumerBody:
        """Merge-patch the status; with ``resource_version`` the write fails (Conflict) if the
        CR changed since it was read: the status carries the epochs, which must never be
        written from a stale read."""
        patch: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        self._count("status")
        body: specs.ConsumerBody = await self._call(
            f"patch EventHubConsumer {namespace}/{name} status",
            self._custom.patch_namespaced_custom_object_status,
            group=specs.GROUP,
            version=specs.VERSION,
            namespace=namespace,
            plural=specs.PLURAL,
            name=name,
            body=patch,
            _content_type=MERGE_PATCH,
        )
        return body

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        self._count("event")
        await self._call(
            f"create Event in {namespace}",
            self._core.create_namespaced_event,
            namespace=namespace,
            body=dict(body),
        )
