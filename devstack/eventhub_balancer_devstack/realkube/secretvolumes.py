"""The files of the Secret volumes of the pods the local node runs, kept up with their Secrets.

A kubelet writes a Secret volume at the pod's start and again at its periodic sync of the pod
once the Secret changed (within a minute or so), so a consumer pod follows a rotated
credential in its files without a restart. The local node wrote them once, at start: a Secret
changed under running pods kept its old value on this machine. `SecretVolumes.sync`, called
from the node's probe round, reads each running pod's Secrets every `SYNC_S` and rewrites the
files that changed (`deployments.refresh_secret_volumes`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack import deployments
from eventhub_balancer_devstack.realkube import runningpods

logger = logging.getLogger(__name__)

#: Seconds between two reads of the running pods' Secrets: sooner than a kubelet (its sync
#: period is a minute), for a local stack one tries a rotation on.
SYNC_S = 5.0


class SecretVolumes:
    """Every `SYNC_S` on ``clock``, the files of each running pod's Secret volumes written
    again from its Secrets (``secret_value(namespace)``), under ``state/NS/NAME/volumes``."""

    def __init__(
        self,
        secret_value: Callable[[str], Callable[[str, str], str]],
        state: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret_value = secret_value
        self._state = state
        self._clock = clock
        self._due = clock() + SYNC_S

    def sync(self, pods: Iterable[runningpods.RunningPod]) -> None:
        now = self._clock()
        if now < self._due:
            return
        self._due = now + SYNC_S
        for pod in pods:
            folder = self._state / pod.namespace / pod.name / "volumes"
            try:
                changed = deployments.refresh_secret_volumes(
                    pod.spec, self._secret_value(pod.namespace), folder
                )
            except (deployments.UnrunnableSpec, ApiException, OSError):
                # A Secret gone, the API away, or the pod's folder removed as it stopped: the
                # files stay as they are, as a kubelet's do, and the next round tries again.
                continue
            for path in changed:
                logger.info(
                    "pod %s/%s: %s written again: its Secret changed",
                    pod.namespace,
                    pod.name,
                    path.relative_to(folder),
                )
