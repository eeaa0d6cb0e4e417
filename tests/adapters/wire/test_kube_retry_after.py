"""A throttled read waits for the server's ``Retry-After`` only when it is short.

urllib3 sends a GET, PUT or DELETE answered 429, 503 or 413 with a ``Retry-After`` again by
itself, after sleeping what the header says, up to six hours: a proxy in front of the API
server that asked for an hour held the operator's read (its cycle, or its relisting) and a
pod's read for that hour, far past their request bound (`kubeclients.REQUEST_TIMEOUT`).
Replayed here on the local API server's fault hook, as a real kube-apiserver's API Priority
and Fairness answers: ``Retry-After: 1`` and a plain-text body.
"""

from __future__ import annotations

import asyncio
import time

import kmock
import pytest
import urllib3
import urllib3.exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeapi, kubeclients, kuberetries
from eventhub_balancer_devstack.kube import LocalKubeAPI

NS = "throttled"
#: What kube-apiserver's API Priority and Fairness answers a request it rejects.
THROTTLED = b"Too many requests, please try again later.\n"


def throttle(local_kube: LocalKubeAPI, *, times: int, retry_after: str, status: int = 429) -> None:
    """The next ``times`` LISTs of pods answered ``status`` with this ``Retry-After``."""
    (
        local_kube.handler["list", kmock.resource("v1/pods")][:times]
        << status
        << kmock.headers({"Retry-After": retry_after})
        << THROTTLED
    )


@pytest.mark.parametrize("status", [429, 503])
async def test_a_long_retry_after_is_not_waited_within_the_request(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI, status: int
) -> None:
    # 30 s: past the read's 15 s bound, and short enough that the code before the fix (which
    # sleeps it in the call's thread) ends within the test.
    throttle(local_kube, times=1, retry_after="30", status=status)
    began = time.monotonic()
    with pytest.raises(errors.ApiUnavailable, match=rf"answered {status}") as refused:
        await asyncio.wait_for(operator_api.list_pods(namespace=NS, label_selector="app=x"), 20)
    assert time.monotonic() - began < kubeclients.REQUEST_TIMEOUT
    # A throttle says how long it asked: the daemon paces its next attempt by it.
    throttled = (
        refused.value.retry_after if isinstance(refused.value, errors.ApiThrottled) else None
    )
    assert throttled == 30.0
    # Given back to the caller, whose own pace (the next cycle, the next relisting) decides.
    assert await operator_api.list_pods(namespace=NS, label_selector="app=x") == []


async def test_the_real_servers_retry_after_is_still_waited(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    """kube-apiserver's ``Retry-After: 1``: the read is sent again after it, and succeeds."""
    throttle(local_kube, times=2, retry_after="1")
    began = time.monotonic()
    assert (
        await asyncio.wait_for(operator_api.list_pods(namespace=NS, label_selector="app=x"), 20)
        == []
    )
    assert time.monotonic() - began >= 2.0


def answer(status: int, retry_after: str) -> urllib3.HTTPResponse:
    return urllib3.HTTPResponse(body=b"", status=status, headers={"Retry-After": retry_after})


@pytest.mark.parametrize(
    ("retry_after", "waited"),
    [("1", True), ("2", True), ("3", False), ("21600", False)],
)
def test_the_pods_and_the_operators_retries_wait_a_short_retry_after_only(
    retry_after: str, waited: bool
) -> None:
    """The pods' client (`podconfig.api_client`) has the same retries as the operator's."""
    retries = kuberetries.client_retries()
    if waited:
        assert retries.increment("GET", "/", response=answer(429, retry_after)).total == 2
    else:
        with pytest.raises(urllib3.exceptions.MaxRetryError, match="Retry-After"):
            retries.increment("GET", "/", response=answer(429, retry_after))


@pytest.mark.parametrize("status", [429, 503])
async def test_a_throttled_write_says_the_retry_after_it_was_given(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI, status: int
) -> None:
    """A write is never sent again by the client: the daemon is told what the server asked.
    A 503 that says when to come back is a throttle as a 429 is: its consumer's cycle probes
    at the server's pace (`handlers.throttles`) instead of backing off up to a minute."""
    (
        local_kube.handler["patch", kmock.resource("v1/configmaps")][:1]
        << status
        << kmock.headers({"Retry-After": "1"})
        << THROTTLED
    )
    with pytest.raises(errors.ApiThrottled, match=f"answered {status}") as refused:
        await operator_api.patch_configmap(
            namespace=NS, name="m", patch={"data": {"a": "b"}}, resource_version=None
        )
    assert refused.value.retry_after == 1.0


async def test_a_503_without_a_retry_after_is_no_throttle(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    """A server that is away, not shedding load, says nothing of when: the cycle backs off."""
    local_kube.handler["patch", kmock.resource("v1/configmaps")][:1] << 503 << THROTTLED
    with pytest.raises(errors.ApiUnavailable, match="answered 503") as refused:
        await operator_api.patch_configmap(
            namespace=NS, name="m", patch={"data": {"a": "b"}}, resource_version=None
        )
    assert not isinstance(refused.value, errors.ApiThrottled)
