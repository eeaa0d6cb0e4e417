"""What the operator's log says of Kubernetes Events the API server refuses for a while.

The Events of the moves are posted one at a time beside the cycles (`eventposts`). An API
server that refuses Events (an EventRateLimit admission answers 429 once a namespace posts too
many; API Priority and Fairness throttles, an overloaded server answers 503) refused each one,
and each refusal was one WARNING: a rollout's 40 moves, 40 lines. Now the first refusal is
said, the ones after it are counted, a refusal that lasts is reminded of at most every
`cyclefaults.REMIND_SECONDS`, and the first Event posted again says how many were refused.
On fake time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeclients
from eventhub_balancer.handlers import cyclefaults, eventposts

pytestmark = pytest.mark.looptime

NS = "shop"
REFUSED = 40


class RefusingEvents:
    """An API server that refuses the next ``refusing`` Events (429), a second each."""

    def __init__(self, refusing: int) -> None:
        self.refusing = refusing
        self.posted: list[str] = []

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        await asyncio.sleep(1)
        if self.refusing:
            self.refusing -= 1
            raise errors.ApiUnavailable(
                f"create Event in {namespace}: API server answered 429 (limit reached on type "
                f"Namespace for key {namespace})"
            )
        self.posted.append(str(body["reason"]))


def event(reason: str) -> dict[str, Any]:
    return {"metadata": {"namespace": NS}, "involvedObject": {"name": "orders"}, "reason": reason}


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and r.name.startswith("eventhub_balancer")
    ]


async def test_a_run_of_refused_events_is_said_once_and_its_end_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = RefusingEvents(REFUSED)
    poster = eventposts.Poster(api)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG):
        for i in range(REFUSED):
            poster.post(event(f"Moved{i}"))
        assert await poster.flushed(limit_seconds=10 * REFUSED)
        warned = lines(caplog, logging.WARNING)
        assert len(warned) == 1, warned
        assert "Moved0" in warned[0]
        assert "429" in warned[0]
        poster.post(event("Taken"))
        assert await poster.flushed(limit_seconds=10)
    assert api.posted == ["Taken"]
    ended = [line for line in lines(caplog, logging.INFO) if "posted again" in line]
    assert len(ended) == 1, ended
    assert f"{REFUSED} refused" in ended[0]
    assert len(lines(caplog, logging.WARNING)) == 1


async def test_a_refusal_that_lasts_is_reminded_at_a_bounded_pace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One Event a second, refused for three reminder periods.
    refusing = int(3 * cyclefaults.REMIND_SECONDS)
    api = RefusingEvents(refusing)
    poster = eventposts.Poster(api, limit=refusing + 1)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG):
        for i in range(refusing):
            poster.post(event(f"Moved{i}"))
        assert await poster.flushed(limit_seconds=2 * refusing)
    warned = lines(caplog, logging.WARNING)
    assert 3 <= len(warned) <= 4, warned
    assert "still refused" in warned[-1], warned


#: What kube-apiserver answers a create in a namespace being deleted (its NamespaceLifecycle
#: admission), as the operator's adapter takes it.
TERMINATING_BODY = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'events "orders-" is forbidden: unable to create new content in namespace gone '
    "because it is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "orders-",
        "kind": "events",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace gone is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
    "code": 403,
}


def terminating(what: str) -> errors.EventHubBalancerError:
    refused = kube_exceptions.ApiException(status=403, reason="Forbidden")
    refused.body = json.dumps(TERMINATING_BODY)
    return kubeclients._wrap(refused, what)


class TerminatingNamespace:
    """An API server on which namespace ``gone`` is being deleted."""

    def __init__(self) -> None:
        self.posted: list[str] = []

    async def create_event(self, *, namespace: str, body: Mapping[str, Any]) -> None:
        await asyncio.sleep(0.01)
        if namespace == "gone":
            raise terminating(f"create Event in {namespace}")
        self.posted.append(str(body["reason"]))


async def test_events_refused_by_a_namespace_being_deleted_warn_of_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``kubectl delete namespace`` while the operator runs: the Events of the consumer's last
    cycles there are refused. That is no fault to fix (the WARNING said to grant the
    operator's ServiceAccount access), and the next Event posted elsewhere ends no run."""
    api = TerminatingNamespace()
    poster = eventposts.Poster(api)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG):
        for reason in ("PartitionTakenOver", "PartitionUnassigned"):
            poster.post({**event(reason), "metadata": {"namespace": "gone"}})
        poster.post(event("PartitionAssigned"))
        assert await poster.flushed(limit_seconds=10)
    assert api.posted == ["PartitionAssigned"]
    assert lines(caplog, logging.WARNING) == []
    assert not [line for line in lines(caplog, logging.INFO) if "posted again" in line]
    said = " ".join(lines(caplog, logging.DEBUG))
    assert "create Event in gone: refused, the namespace is being deleted" in said
    assert "grant" not in said
