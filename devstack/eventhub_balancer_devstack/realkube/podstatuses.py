"""The status a local node writes for its pods, as a kubelet reports them.

Running with Ready from the readiness probe (or waiting in CrashLoopBackOff between restarts),
and Pending with ``CreateContainerConfigError`` and the reason for a pod the node cannot run
(an image it has no entry point for, a field it does not serve).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack.realkube import nodeleases, resourcecalls

logger = logging.getLogger(__name__)

#: A pod's deletion confirmed while the API is away is tried this often, `CONFIRM_RETRY_S`
#: apart, unless the node stops meanwhile: then the objects stay, as when a node goes down.
CONFIRM_TRIES = 10
CONFIRM_RETRY_S = 1.0


def running(
    *,
    container: str,
    image: str,
    started_at: str,
    alive: bool,
    ready: bool,
    restarts: int,
    ready_since: str = "",
    last_exit: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod whose process runs (``alive``) or waits for its restart; Ready (and
    ContainersReady) since ``ready_since``, its containers' last end ``last_exit``."""
    flag = "True" if ready else "False"
    now = nodeleases.now()
    since = ready_since or now
    state: dict[str, Any] = (
        {"running": {"startedAt": started_at}}
        if alive
        else {"waiting": {"reason": "CrashLoopBackOff", "message": "the process exited"}}
    )
    return {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "startTime": started_at,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": since},
            {"type": "Ready", "status": flag, "lastTransitionTime": since},
        ],
        "containerStatuses": [
            {
                "name": container,
                "image": image,
                "imageID": "",
                "ready": ready,
                "started": alive,
                "restartCount": restarts,
                "state": state,
                "lastState": {"terminated": dict(last_exit)} if last_exit else {},
            }
        ],
    }


def refuse(calls: resourcecalls.ResourceCalls, pod: dict[str, Any], message: str) -> None:
    """Say that ``pod``, bound here, cannot run: in the log, and in its status as `refused`."""
    metadata, container = pod["metadata"], pod["spec"]["containers"][0]
    logger.warning(
        "pod %s/%s cannot run here: %s", metadata["namespace"], metadata["name"], message
    )
    status = refused(container=container["name"], image=container.get("image", ""), message=message)
    patch(calls, metadata["namespace"], metadata["name"], status)


def refused(*, container: str, image: str, message: str) -> dict[str, Any]:
    """A pod bound here that cannot run: why, where ``kubectl describe`` shows it."""
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": nodeleases.now()}
        ],
        "containerStatuses": [
            {
                "name": container,
                "image": image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}},
            }
        ],
    }


def patch(
    calls: resourcecalls.ResourceCalls, namespace: str, name: str, status: dict[str, Any]
) -> None:
    """Write it; a pod that is gone meanwhile is no error."""
    try:
        calls.patch("v1/pods", name, {"status": status}, namespace=namespace, subresource="status")
    except ApiException as e:
        if e.status != 404:
            raise


def confirm_deleted(
    calls: resourcecalls.ResourceCalls,
    metadata: Mapping[str, Any],
    *,
    stopping: threading.Event,
    tries: int = CONFIRM_TRIES,
) -> None:
    """The containers are gone: delete the Pod with grace 0, on its uid only, as a kubelet
    tells the API server. Gone already (or another pod under the name) is no error, nor an
    API that went away as the node stops: a stack stopped with Ctrl-C printed a reaper
    thread's traceback, ``Connection reset by peer``."""
    where = f"{metadata['namespace']}/{metadata['name']}"
    for attempt in range(1, tries + 1):
        try:
            calls.call(
                "DELETE",
                f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}",
                body={
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": metadata["uid"]},
                },
            )
            return
        except ApiException:
            return
        except Exception as e:  # the API away: refused, reset, timed out
            if stopping.is_set():
                logger.debug("pod %s: deletion not confirmed, the node stops: %r", where, e)
                return
            if attempt == tries:
                logger.warning(
                    "pod %s: deletion not confirmed after %d tries: %r", where, attempt, e
                )
                return
            stopping.wait(CONFIRM_RETRY_S)
