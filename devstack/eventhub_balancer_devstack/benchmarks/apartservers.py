"""The local Kubernetes API server in a process of its own, seen from the benchmark's side.

The child is `processes`' ``apiserver`` role; this is the `LocalKubeAPI` a harness holds for it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Self, cast

from eventhub_balancer_devstack.benchmarks import processes
from eventhub_balancer_devstack.kube import LocalKubeAPI, histories


class ApiServerApart(LocalKubeAPI):
    """The local Kubernetes API server in a process of its own (`processes`' ``apiserver``),
    as in a cluster: in the benchmark's process it would share one interpreter lock with the
    emulator, the producer and the harness's polling (four A/B runs on 27 November showed no
    difference beyond their spread). The harness's direct store calls (create, get, list, and
    the write record) go to the child over its pipe; a kubeconfig points at the child. The
    other direct calls of `LocalKubeAPI` (pauses, watch faults) are the chaos harness's, which
    keeps its server in its own process, and are not served here."""

    def __init__(self, *, directory: Path) -> None:
        super().__init__()
        self._directory = directory
        self._child: processes.Child | None = None
        self._lock = threading.Lock()
        self._served_url: str | None = None

    @property
    def url(self) -> str:
        if self._served_url is None:
            raise RuntimeError("the local Kubernetes API is not running: call start() first")
        return self._served_url

    def start(self) -> Self:
        if self._child is not None:
            raise RuntimeError("the local Kubernetes API is already started")
        self._directory.mkdir(parents=True, exist_ok=True)
        self._child = processes.Child(
            "apiserver", "--kubeconfig", str(self._directory / "apart-kubeconfig")
        )
        self._served_url = str(self._child.ready["url"])
        return self

    def stop(self) -> None:
        child, self._child = self._child, None
        self._served_url = None
        if child is not None:
            child.stop()

    def _line(self, line: str) -> dict[str, Any]:
        """One line to the child and its answer, one caller at a time."""
        with self._lock:
            if self._child is None:
                raise RuntimeError("the local Kubernetes API is not running: call start() first")
            return self._child.ask(line)

    def _ask(self, call: str, **args: Any) -> Any:
        return self._line(json.dumps({"call": call, "args": args}))["result"]

    def create_object(
        self, resource: str, body: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._ask(
            "create_object", resource=resource, body=body, namespace=namespace
        )
        return result

    def get_object(
        self, resource: str, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._ask(
            "get_object", resource=resource, name=name, namespace=namespace
        )
        return result

    def list_objects(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._ask(
            "list_objects",
            resource=resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        return result

    def record_writes(self, *resources_: str) -> None:
        self._ask("record_writes", resources=list(resources_))

    def take_writes(self) -> histories.Writes:
        answer = self._line("writes")
        return histories.Writes(
            events=tuple(
                histories.WatchEvent(
                    type=cast(histories.EventType, kind),
                    storage_key=("", ""),
                    body=body,
                    previous=previous,
                    resource_version=0,
                    committed_at=committed_at,
                )
                for kind, body, previous, committed_at in answer["writes"]
            ),
            dropped=int(answer["dropped"]),
        )
