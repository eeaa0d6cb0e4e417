"""In-memory fakes of the operator's ports (`handlers.ports`), for cycle and daemon tests.

`FakeKube` keeps the objects a cycle touches (the EventHubConsumer with its status, pods,
ConfigMaps, Secrets, Events) and behaves as `adapters.kubeapi.KubeAPI` does at its seam:
server-set metadata (uid, resourceVersion, generation), merge patches, 404 as
`errors.NotFound` (swallowed where the adapter swallows it), 409 as `errors.Conflict` (a
create of an existing name, a stale resourceVersion, a delete whose uid precondition fails),
a missing Secret as `errors.SecretNotFound`, and the same ``writes`` counters. Any call can be
made to fail next with `FakeKube.fail`. It also stands for the TokenRequest API of ServiceAccounts
(`adapters.tenantidentities.TokenSource`): tokens are JWT-shaped, numbered, and recorded in
``tokens``. `FakeHubs` and `FakeCheckpointStore` stand for Event
Hubs and the blob container; they record when (loop time) they were asked, so tests on fake
time (looptime) can assert the pacing of retries.

Test helpers (``add_pod``, ``acknowledge``, ``assignment``...) play the cluster's other
actors: the kubelet, the pods' runtime, the garbage collector.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import itertools
import json
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar, cast

from eventhub_balancer import errors
from eventhub_balancer.adapters import listings
from eventhub_balancer.contracts import (
    configmaps,
    podassignments,
    specs,
    startpositions,
    storeaddresses,
    timestamps,
)
from eventhub_balancer.reconciling import conflicts, observations

#: The objects a fake holds, by (kind, namespace, name).
Key = tuple[str, str, str]

_EXPRESSION = re.compile(r"^(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)$")


def selector_matches(query: str, labels: Mapping[str, str]) -> bool:
    """Evaluate a ``labelSelector`` query string as the API server does (the forms we use)."""
    for term in re.split(r",(?![^(]*\))", query) if query else []:
        term = term.strip()
        if m := _EXPRESSION.match(term):
            values = {v.strip() for v in m["values"].split(",")}
            present = m["key"] in labels and labels[m["key"]] in values
            if present != (m["op"] == "in"):
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


_SCALARS = (str, int, float, bool, type(None))
_Body = TypeVar("_Body")


def copied(body: _Body) -> _Body:
    """A deep copy of a body as the API server holds it (dicts, lists, scalars), without
    `copy.deepcopy`'s memo: a body shares and loops nothing, and the fake copies every body it
    stores, lists and watches, which took 40 % of the memory test's time. Anything else is
    copied by `copy.deepcopy`."""
    kind = type(body)
    if kind is dict:
        items = cast(dict[Any, Any], body).items()
        return cast(_Body, {key: copied(value) for key, value in items})
    if kind is list:
        return cast(_Body, [copied(value) for value in cast(list[Any], body)])
    if kind in _SCALARS:
        return body
    return copy.deepcopy(body)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: None deletes, objects merge, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copied(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeKube:
    """An in-memory Kubernetes API behind `ports.KubePort`."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.writes: dict[str, int] = {}
        #: every write in call order: (verb, kind, name)
        self.calls: list[tuple[str, str, str]] = []
        self._failures: dict[str, list[errors.EventHubBalancerError]] = {}
        self._versions = itertools.count(1)
        #: the last resourceVersion given out (what a LIST answers as of)
        self.version = "0"
        #: every body stored, in order, as the API server's own record of its writes
        self.history: list[tuple[str, dict[str, Any]]] = []
        #: every change in order, as a watch sees it: (kind, body, ADDED|MODIFIED|DELETED)
        self.changes: list[tuple[str, dict[str, Any], str]] = []
        self._uids = itertools.count(1)
        #: every token given out: (namespace, ServiceAccount, audience, seconds, token)
        self.tokens: list[tuple[str, str, str, int, str]] = []

    # --- the port ---

    async def get_consumer(self, *, namespace: str, name: str) -> specs.ConsumerBody:
        self._maybe_fail("get_consumer")
        body: Any = self._get("consumer", namespace, name)
        return cast(specs.ConsumerBody, body)

    async def list_pods(self, *, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self._maybe_fail("list_pods")
        return self._list("pod", namespace, label_selector)

    async def list_configmaps(self, *, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self._maybe_fail("list_configmaps")
        return self._list("configmap", namespace, label_selector)

    async def select_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> list[Mapping[str, Any]]:
        return list(await self.list_pods(namespace=namespace, label_selector=selector.to_query()))

    async def consumer_configmaps(
        self, *, namespace: str, consumer: str
    ) -> list[Mapping[str, Any]]:
        return list(
            await self.list_configmaps(
                namespace=namespace, label_selector=configmaps.consumer_selector(consumer)
            )
        )

    async def list_selected_pods(
        self, *, namespace: str, selector: specs.Selector
    ) -> listings.Listing:
        items = await self.list_pods(namespace=namespace, label_selector=selector.to_query())
        return listings.Listing(items=tuple(items), metadata={"resourceVersion": self.version})

    async def list_consumer_configmaps(self, *, namespace: str, consumer: str) -> listings.Listing:
        items = await self.list_configmaps(
            namespace=namespace, label_selector=configmaps.consumer_selector(consumer)
        )
        return listings.Listing(items=tuple(items), metadata={"resourceVersion": self.version})

    async def list_managed_configmaps(self, *, namespace: str) -> listings.Listing:
        items = await self.list_configmaps(
            namespace=namespace, label_selector=configmaps.MANAGED_SELECTOR
        )
        return listings.Listing(items=tuple(items), metadata={"resourceVersion": self.version})

    async def read_configmap(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        self._maybe_fail("read_configmap")
        body = self.objects.get(("configmap", namespace, name))
        return copied(body) if body is not None else None

    def forget_secret(self, *, namespace: str, name: str) -> None:
        """Nothing kept here: every read is fresh (`cache.serving.CachedKube` keeps them)."""

    def stamp(self, *, namespace: str, name: str) -> Hashable | None:
        """None: no watch here, so no decision is skipped."""
        return None

    def departures(self, *, namespace: str, name: str) -> observations.Departures:
        """Every read is fresh here: a pod a read lacks is gone."""
        return observations.UNCACHED

    def forget_pods(self, *, namespace: str, name: str) -> None:
        """Nothing kept here: every read is fresh."""

    def peers(self) -> tuple[conflicts.Peer, ...]:
        """None known: there is no watch of the other EventHubConsumers here."""
        return ()

    async def read_secret_key(self, *, namespace: str, name: str, key: str) -> str:
        self._maybe_fail("read_secret_key")
        secret = self.objects.get(("secret", namespace, name))
        if secret is None or key not in secret["data"]:
            raise errors.SecretNotFound(
                namespace=namespace, name=name, key=key, missing_key=secret is not None
            )
        return str(secret["data"][key])

    async def create_configmap(self, *, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        name = str(body["metadata"]["name"])
        self._write("create", "configmap", name)
        if ("configmap", namespace, name) in self.objects:
            raise errors.Conflict(f"create ConfigMap {namespace}/{name}: conflict (AlreadyExists)")
        return self._store("configmap", namespace, copied(dict(body)))

    async def patch_configmap(
        self, *, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        self._write("patch", "configmap", name)
        current = self._get("configmap", namespace, name)
        if resource_version and current["metadata"]["resourceVersion"] != resource_version:
            raise errors.Conflict(f"patch ConfigMap {namespace}/{name}: conflict (Conflict)")
        return self._store("configmap", namespace, merge_patch(current, patch))

    async def replace_configmap_data(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        generation: str,
        data: Mapping[str, str],
    ) -> dict[str, Any]:
        # A patch as the API server counts it, and fails it (`fail("patch_configmap", ...)`).
        self._write("patch", "configmap", name)
        current = self.objects.get(("configmap", namespace, name))
        if current is None:
            raise errors.NotFound(f"patch ConfigMap {namespace}/{name}: not found")
        held = (current.get("data") or {}).get(configmaps.KEY_GENERATION)
        if current["metadata"]["uid"] != uid or held != generation:
            raise errors.Conflict(f"patch ConfigMap {namespace}/{name}: conflict (test failed)")
        body = copied(current)
        body["data"] = dict(data)
        return self._store("configmap", namespace, body)

    async def delete_configmap(self, *, namespace: str, name: str, uid: str | None) -> None:
        self._write("delete", "configmap", name)
        current = self.objects.get(("configmap", namespace, name))
        if current is None:
            return  # gone already is fine
        if uid and current["metadata"]["uid"] != uid:
            raise errors.Conflict(f"delete ConfigMap {namespace}/{name}: conflict (uid)")
        self._delete("configmap", namespace, name)

    async def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any] | None:
        self._write("annotate", "pod", name)
        current = self.objects.get(("pod", namespace, name))
        if current is None:  # deleted meanwhile: nothing left to annotate
            return None
        return self._store(
            "pod", namespace, merge_patch(current, {"metadata": {"annotations": annotations}})
        )

    async def patch_consumer_status(
        self,
        *,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None,
    ) -> specs.ConsumerBody:
        self._write("patch", "status", name)
        current = self._get("consumer", namespace, name)
        if resource_version and current["metadata"]["resourceVersion"] != resource_version:
            raise errors.Conflict(f"patch EventHubConsumer {namespace}/{name} status: conflict")
        body: Any = self._store("consumer", namespace, merge_patch(current, {"status": status}))
        return cast(specs.ConsumerBody, body)

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        self._write("create", "event", str(body.get("reason")))
        self.events.append(copied(dict(body)))

    async def read_service_account(self, *, namespace: str, name: str) -> dict[str, Any]:
        self._maybe_fail("read_service_account")
        return self._get("serviceaccount", namespace, name)

    async def request_service_account_token(
        self, *, namespace: str, name: str, audience: str, expiration_seconds: int
    ) -> dict[str, Any]:
        """A TokenRequest's status: an unsigned JWT naming the ServiceAccount and audience."""
        self._maybe_fail("request_service_account_token")
        self._get("serviceaccount", namespace, name)  # NotFound, as the API server answers
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
            seconds=expiration_seconds
        )
        claims = {
            "aud": [audience],
            "sub": f"system:serviceaccount:{namespace}:{name}",
            "exp": int(expires.timestamp()),
            "jti": str(len(self.tokens) + 1),
        }
        payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        token = f"eyJhbGciOiJub25lIn0.{payload}."
        self.tokens.append((namespace, name, audience, expiration_seconds, token))
        return {"token": token, "expirationTimestamp": timestamps.format_time(expires)}

    # --- the other actors ---

    def fail(self, method: str, error: errors.EventHubBalancerError, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` raise ``error``."""
        self._failures.setdefault(method, []).extend([error] * times)

    def add_consumer(
        self, namespace: str, name: str, spec: Mapping[str, Any], *, status: Any = None
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": f"{specs.GROUP}/{specs.VERSION}",
            "kind": specs.KIND,
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": copied(dict(spec)),
        }
        if status is not None:
            body["status"] = copied(status)
        self._store("consumer", namespace, body)

    def set_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        """A user's edit: the generation goes up."""
        body = self._get("consumer", namespace, name)
        body["spec"] = copied(dict(spec))
        body["metadata"]["generation"] += 1
        self._store("consumer", namespace, body)

    def add_secret(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self._store("secret", namespace, {"metadata": {"name": name}, "data": dict(data)})

    def add_service_account(
        self,
        namespace: str,
        name: str,
        *,
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        meta = {"name": name, "annotations": dict(annotations or {}), "labels": dict(labels or {})}
        self._store("serviceaccount", namespace, {"metadata": meta})

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str],
        since: datetime.datetime,
        ready: bool = True,
    ) -> None:
        body = {
            "metadata": {
                "name": name,
                "labels": dict(labels),
                "creationTimestamp": timestamps.format_time(since),
            },
            "status": {"phase": "Running"},
        }
        self._store("pod", namespace, body)
        self.set_ready(namespace, name, ready=ready, since=since)

    def set_ready(
        self, namespace: str, name: str, *, ready: bool, since: datetime.datetime
    ) -> None:
        pod = self._get("pod", namespace, name)
        pod["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": timestamps.format_time(since),
            }
        ]
        self._store("pod", namespace, pod)

    def terminate(self, namespace: str, name: str, *, at: datetime.datetime) -> None:
        """A graceful deletion: the pod stays, with its deletionTimestamp, while it stops."""
        pod = self._get("pod", namespace, name)
        pod["metadata"]["deletionTimestamp"] = timestamps.format_time(at)
        self._store("pod", namespace, pod)

    def release_all(self, namespace: str, pod: str) -> None:
        """What a pod's runtime does on SIGTERM: release every partition it holds."""
        cm = self.configmap_of(namespace, pod)
        parsed = podassignments.parse_data(cm["data"])
        released = {str(p): e.epoch for p, e in parsed.partitions.items()}
        cm["metadata"].setdefault("annotations", {})[configmaps.ANNOTATION_RELEASED] = (
            configmaps.build_released(released)
        )
        self._store("configmap", namespace, cm)

    def remove_pod(self, namespace: str, name: str) -> None:
        """The pod is gone, and the garbage collector takes the ConfigMaps it owns."""
        pod = self.objects.pop(("pod", namespace, name))
        self._deleted("pod", pod)
        uid = pod["metadata"]["uid"]
        for key, body in list(self.objects.items()):
            owners = body["metadata"].get("ownerReferences") or []
            if key[0] == "configmap" and any(o.get("uid") == uid for o in owners):
                self._delete("configmap", key[1], key[2])

    def release_finalizers(self, namespace: str, name: str) -> None:
        """Someone else's controller takes its finalizers off a ConfigMap: one being deleted
        goes."""
        cm = self._get("configmap", namespace, name)
        cm["metadata"].pop("finalizers", None)
        if cm["metadata"].get("deletionTimestamp"):
            del self.objects["configmap", namespace, name]
            self._deleted("configmap", cm)
        else:
            self._store("configmap", namespace, cm)

    def configmap_of(self, namespace: str, pod: str) -> dict[str, Any]:
        """A pod's assignment ConfigMap, found by its label as the pod finds it."""
        for (kind, ns, _), body in self.objects.items():
            labels = body["metadata"].get("labels") or {}
            if kind == "configmap" and ns == namespace and labels.get(configmaps.LABEL_POD) == pod:
                return body
        raise KeyError(f"no ConfigMap for pod {namespace}/{pod}")

    def acknowledge(self, namespace: str, pod: str) -> None:
        """What a pod's runtime does: release every revoking partition at its epoch."""
        cm = self.configmap_of(namespace, pod)
        parsed = podassignments.parse_data(cm["data"])
        released = {str(p): e.epoch for p, e in parsed.partitions.items() if e.state == "revoking"}
        cm["metadata"].setdefault("annotations", {})[configmaps.ANNOTATION_RELEASED] = (
            configmaps.build_released(released)
        )
        self._store("configmap", namespace, cm)

    def apply_generation(self, namespace: str, pod: str) -> None:
        """What a pod's runtime does once it runs what its ConfigMap gives it: say so."""
        cm = self.configmap_of(namespace, pod)
        generation = podassignments.parse_data(cm["data"]).generation
        cm["metadata"].setdefault("annotations", {})[configmaps.ANNOTATION_APPLIED_GENERATION] = (
            configmaps.build_applied_generation(generation)
        )
        self._store("configmap", namespace, cm)

    def assignment(self, namespace: str) -> dict[str, dict[str, tuple[int, str]]]:
        """pod -> {partition: (epoch, state)} as the ConfigMaps say."""
        result: dict[str, dict[str, tuple[int, str]]] = {}
        for (kind, ns, _), body in sorted(self.objects.items()):
            if kind == "configmap" and ns == namespace:
                parsed = podassignments.parse_data(body.get("data") or {})
                result[parsed.pod] = {p: (e.epoch, e.state) for p, e in parsed.partitions.items()}
        return result

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return copied(self._get("consumer", namespace, name).get("status") or {})

    def condition(self, namespace: str, name: str, type_: str) -> dict[str, Any]:
        conditions = self.status(namespace, name).get("conditions") or []
        return next(c for c in conditions if c["type"] == type_)

    # --- internals ---

    def _maybe_fail(self, method: str) -> None:
        pending = self._failures.get(method)
        if pending:
            raise pending.pop(0)

    def _write(self, verb: str, kind: str, name: str) -> None:
        # Counted before the call, as the adapter counts: a failed write was still attempted.
        self.writes[kind] = self.writes.get(kind, 0) + 1
        self.calls.append((verb, kind, name))
        method = {
            ("create", "configmap"): "create_configmap",
            ("patch", "configmap"): "patch_configmap",
            ("delete", "configmap"): "delete_configmap",
            ("annotate", "pod"): "patch_pod_annotations",
            ("patch", "status"): "patch_consumer_status",
            ("create", "event"): "create_event",
        }[verb, kind]
        self._maybe_fail(method)

    def _get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        body = self.objects.get((kind, namespace, name))
        if body is None:
            raise errors.NotFound(f"{kind} {namespace}/{name}: not found")
        return copied(body)

    def _list(self, kind: str, namespace: str, query: str) -> list[dict[str, Any]]:
        return [
            copied(body)
            for (k, ns, _), body in sorted(self.objects.items())
            if k == kind
            and ns == namespace
            and selector_matches(query, body["metadata"].get("labels") or {})
        ]

    def _bump(self) -> str:
        """The next resourceVersion: one counter for every write, deletions included, as an
        API server's (etcd's revision)."""
        self.version = str(next(self._versions))
        return self.version

    def _store(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta.setdefault("uid", f"uid-{kind}-{next(self._uids)}")
        meta["resourceVersion"] = self._bump()
        existed = (kind, namespace, meta["name"]) in self.objects
        self.objects[kind, namespace, meta["name"]] = body
        self.history.append((kind, copied(body)))
        self.changes.append((kind, copied(body), "MODIFIED" if existed else "ADDED"))
        return copied(body)

    def _delete(self, kind: str, namespace: str, name: str) -> None:
        """A deletion, as the API server does it: an object that carries finalizers (someone
        else's) only gets its deletionTimestamp, once, and stays until they are taken off."""
        body = self.objects[kind, namespace, name]
        if not body["metadata"].get("finalizers"):
            self._deleted(kind, self.objects.pop((kind, namespace, name)))
        elif not body["metadata"].get("deletionTimestamp"):
            held = copied(body)
            held["metadata"]["deletionTimestamp"] = timestamps.format_time(
                datetime.datetime.now(datetime.UTC)
            )
            self._store(kind, namespace, held)

    def _deleted(self, kind: str, body: dict[str, Any]) -> None:
        """A deletion as the watch sees it: the last body, at the deletion's version."""
        gone = copied(body)
        gone["metadata"]["resourceVersion"] = self._bump()
        self.changes.append((kind, gone, "DELETED"))


def store_address(**given: Any) -> storeaddresses.StoreAddress:
    """A checkpoint store's address: shop's hub ``orders``, consumer group ``$Default``,
    container ``checkpoints``, read as an identity (no connection string); ``given`` replaces
    any of it."""
    where: dict[str, Any] = {
        "fully_qualified_namespace": "shop.servicebus.windows.net",
        "eventhub_name": "orders",
        "consumer_group": "$Default",
        "container_name": "checkpoints",
        "connection_string": None,
    }
    return storeaddresses.StoreAddress(**{**where, **given})


class FakeCheckpointStore:
    """The checkpoint blobs of one consumer group: {partition: (epoch, sequence number)}."""

    def __init__(self) -> None:
        self.blobs: dict[str, tuple[int, int]] = {}
        self.failure: errors.EventHubBalancerError | None = None
        #: the loop time of every read
        self.reads: list[float] = []
        #: the SDK's ownership blobs of the consumer group: {partition: ETag}
        self.claims: dict[str, str] = {}
        #: the loop time of every listing of the ownership blobs
        self.claim_reads: list[float] = []
        self._etags = itertools.count(1)

    def claim(self, *partitions: str) -> None:
        """What an SDK processor does at each balancing pass (a claim, a renewal or a
        release): rewrite the partitions' ownership blobs, each under a new ETag."""
        for p in partitions:
            self.claims[p] = f'"0x{next(self._etags):x}"'

    def read_claims(self) -> dict[str, str]:
        self.claim_reads.append(asyncio.get_running_loop().time())
        if self.failure is not None:
            raise self.failure
        return dict(self.claims)

    def fence(self, partition: str, epoch: int, *, sequence_number: int = -1) -> None:
        """What a new owner does on assignment: write its epoch into the blob."""
        self.blobs[partition] = (epoch, sequence_number)

    def read(self) -> dict[str, tuple[int, int]]:
        self.reads.append(asyncio.get_running_loop().time())
        if self.failure is not None:
            raise self.failure
        return dict(self.blobs)


#: A hub as the fake keys it: (namespace, name, hash of the connection string, client id), as
#: `adapters.eventhubs.Coordinates.key` does without the identity.
HubKey = tuple[str, str, int, str | None]


class FakeHubs:
    """Event Hubs and the checkpoint store behind `ports.HubPort`.

    Every hub has the partitions ``ids`` unless ``hub_ids`` names it (by spec.eventHub.name):
    a test grows a hub by setting its entry. ``partitions`` lists afresh every time and keeps
    the list per consumer, with its hub, for the growth watch's calls (``hubs``, ``consumers``,
    ``list_hub``, ``grow``, which keep to the real adapter's rules)."""

    def __init__(
        self, partitions: Sequence[str] = ("0", "1", "2", "3"), *, store: FakeCheckpointStore
    ) -> None:
        self.ids = tuple(partitions)
        #: per hub name, its partitions when they are not ``ids``
        self.hub_ids: dict[str, tuple[str, ...]] = {}
        self.store = store
        self.last_sequences: dict[str, int] = {}
        #: per partition, the first event the hub still holds (0 when not named); past the
        #: last sequence number when retention removed them all
        self.first_sequences: dict[str, int] = {}
        #: raised by every Event Hubs call while set
        self.failure: errors.EventHubBalancerError | None = None
        #: consumer groups that do not exist: listing for one raises, the ids cached
        self.missing_groups: set[str] = set()
        #: the ``now`` (wall seconds) of every partition listing asked for
        self.listings: list[float] = []
        #: (loop time, hub name) of every listing the growth watch asked for (`list_hub`)
        self.hub_listings: list[tuple[float, str]] = []
        #: the ServiceAccount (spec.serviceAccountName) every call was asked to act as
        self.service_accounts: list[str | None] = []
        self._cache: dict[str, tuple[str, ...]] = {}
        self._hub_of: dict[str, HubKey] = {}

    async def close(self) -> None:
        """Nothing kept open here."""

    def forget(self, consumer: str) -> None:
        self._cache.pop(consumer, None)
        self._hub_of.pop(consumer, None)

    def cached(self, consumer: str) -> tuple[str, ...] | None:
        return self._cache.get(consumer)

    def hubs(self) -> list[Hashable]:
        return list(dict.fromkeys(self._hub_of.values()))

    def consumers(self, hub: Hashable) -> dict[str, tuple[str, ...]]:
        return {c: self._cache[c] for c, of in self._hub_of.items() if of == hub}

    async def list_hub(self, hub: Hashable) -> tuple[str, ...] | None:
        known = [of for of in self._hub_of.values() if of == hub]
        name = known[0][1] if known else "?"
        self.hub_listings.append((asyncio.get_running_loop().time(), name))
        if not known:
            return None
        if self.failure is not None:
            raise self.failure
        return self.hub_ids.get(name, self.ids)

    def grow(self, consumer: str, hub: Hashable, ids: tuple[str, ...]) -> bool:
        if self._hub_of.get(consumer) != hub or len(ids) <= len(self._cache[consumer]):
            return False
        self._cache[consumer] = tuple(ids)
        return True

    async def partitions(
        self,
        *,
        consumer: str,
        fully_qualified_namespace: str,
        eventhub_name: str,
        connection_string: str | None,
        client_id: str | None,
        now: float,
        namespace: str | None = None,
        service_account: str | None = None,
        consumer_group: str | None = None,
    ) -> tuple[tuple[str, ...], bool]:
        self.listings.append(now)
        self.service_accounts.append(service_account)
        if self.failure is not None:
            raise self.failure
        ids = self.hub_ids.get(eventhub_name, self.ids)
        self._cache[consumer] = ids
        self._hub_of[consumer] = (
            fully_qualified_namespace,
            eventhub_name,
            hash(connection_string),
            client_id,
        )
        if consumer_group in self.missing_groups:
            raise errors.ConsumerGroupNotFound(
                f"consumer group {consumer_group!r} of Event Hub {eventhub_name!r} in "
                f"{fully_qualified_namespace} does not exist: create it, or fix "
                "spec.eventHub.consumerGroup"
            )
        return ids, True

    async def last_sequence_numbers(
        self,
        *,
        fully_qualified_namespace: str,
        eventhub_name: str,
        connection_string: str | None,
        client_id: str | None,
        partitions: list[str],
        namespace: str | None = None,
        service_account: str | None = None,
    ) -> dict[str, startpositions.PartitionBounds]:
        self.service_accounts.append(service_account)
        if self.failure is not None:
            raise self.failure
        return {p: self.ends(p) for p in partitions if p in self.last_sequences}

    def ends(self, partition: str) -> startpositions.PartitionBounds:
        """What Event Hubs says of ``partition``: its last event, and its first still held."""
        last = self.last_sequences[partition]
        first = self.first_sequences.get(partition, 0)
        return startpositions.PartitionBounds(
            beginning_sequence_number=first,
            last_sequence_number=last,
            last_offset=str(last),
            empty=first > last,
        )

    async def checkpoints(self, address: storeaddresses.StoreAddress) -> dict[str, tuple[int, int]]:
        self.service_accounts.append(address.service_account)
        return self.store.read()

    async def ownership_claims(self, address: storeaddresses.StoreAddress) -> dict[str, str]:
        self.service_accounts.append(address.service_account)
        return self.store.read_claims()
