"""How the operator benchmark's processes follow the local API server: a client, and a watch
that lists once, then follows the stream, and lists again only when a stream fails.

Nobody polls: the harness and the consumer doubles (`doubles`) watch, as kopf in the operator
does, so that what the API server spends is on what the benchmark measures.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.watch

from eventhub_balancer.contracts import configmaps
from eventhub_balancer_devstack.benchmarks import clusterviews

logger = logging.getLogger(__name__)

#: A watch is renewed this often (the server ends it after this many seconds).
WATCH_SECONDS = 60
#: Connections a client keeps to the API server: enough for the doubles' concurrent writes.
POOL_SIZE = 32

OnBody = Callable[[str, Mapping[str, Any]], None]


def client(kubeconfig: Path) -> kubernetes.client.ApiClient:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    configuration.connection_pool_maxsize = POOL_SIZE
    return kubernetes.client.ApiClient(configuration)


def watch_configmaps(
    api: kubernetes.client.ApiClient, namespace: str, stopped: threading.Event, on_body: OnBody
) -> None:
    """Call ``on_body(type, body)`` for every assignment ConfigMap event until ``stopped``."""
    core = kubernetes.client.CoreV1Api(api)
    follow(
        core.list_namespaced_config_map,
        namespace,
        stopped,
        on_body,
        label_selector=configmaps.LABEL_POD,
        what="ConfigMap",
    )


def watch_pods(
    api: kubernetes.client.ApiClient, namespace: str, stopped: threading.Event, on_body: OnBody
) -> None:
    """Call ``on_body(type, body)`` for every consumer pod's event in ``namespace`` until
    ``stopped``: the other workloads' pods beside them (``--other-pods``) are not the doubles'
    concern, and listing thousands of them would take the operator's CPU."""
    core = kubernetes.client.CoreV1Api(api)
    follow(
        core.list_namespaced_pod,
        namespace,
        stopped,
        on_body,
        label_selector=clusterviews.CONSUMER_PODS,
        what="Pod",
    )


def follow(
    list_call: Callable[..., Any],
    namespace: str,
    stopped: threading.Event,
    on_body: OnBody,
    *,
    label_selector: str,
    what: str,
) -> None:
    """List, then watch from the listing's version; listed again only when a watch fails."""
    while not stopped.is_set():
        try:
            listing: Any = list_call(
                namespace, label_selector=label_selector, _preload_content=False
            )
            body = json.loads(listing.data)
            for item in body.get("items", []):
                on_body("ADDED", item)
            version = body["metadata"]["resourceVersion"]
            while not stopped.is_set():
                watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                for event in watch.stream(  # type: ignore[no-untyped-call]
                    list_call,
                    namespace,
                    label_selector=label_selector,
                    resource_version=version,
                    timeout_seconds=WATCH_SECONDS,
                    _preload_content=False,
                ):
                    raw = event["raw_object"]
                    version = raw["metadata"]["resourceVersion"]
                    on_body(event["type"], raw)
                    if stopped.is_set():
                        break
        except Exception as e:  # a failed watch is listed again
            if not stopped.is_set():
                logger.warning("the %s watch failed, listing again: %s", what, e)
                time.sleep(0.1)
