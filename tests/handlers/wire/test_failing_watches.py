"""An API server that fails the operator's watches for longer than kopf retries them: the
operator lists and watches again, and goes on (`kopfwatches`).

kopf gives up on a listing answered 5xx after its error backoffs (about a minute; a few tenths
of a second here), and its watch's task failing used to stop kopf and the operator: replayed
with the EventHubConsumers' listing answered 503 (etcd's leader changing), it stopped, and
Kubernetes would have restarted it at a back-off of up to 5 minutes. Here the listing kopf
makes (and only kopf's: its requests say ``kopf/`` in their User-Agent) is answered 503 over
three of kopf's escalations, then served. An error event in a watch's stream (a 504 ``Too
large resource version``) stopped kopf at once; here the pods' first watch sends one.
"""

from __future__ import annotations

import logging
from typing import Any

import kmock
import pytest

from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for

pytestmark = pytest.mark.slow

#: What kube-apiserver answers while etcd has no leader.
UNAVAILABLE = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "etcdserver: leader changed",
    "reason": "ServiceUnavailable",
    "code": 503,
}
#: The loggers of kopf and of the operator's wrappers of it (``handlers.kopf*``).
KOPFS = ("kopf", "eventhub_balancer.handlers.kopf")
#: kopf's four attempts (`short_backoffs`), given up on three times over.
FAILED = 4 * 3


def by_kopf(request: Any) -> bool:
    return str(request.headers.get("User-Agent", "")).startswith("kopf/")


def consumer_of_two_pods(stack: Stack, ns: str) -> None:
    stack.secret(ns)
    stack.consumer(ns)
    for i in range(2):
        stack.pod(ns, f"c-{i}")


def said_by_kopf(caplog: pytest.LogCaptureFixture) -> tuple[list[logging.LogRecord], str]:
    """What kopf and the operator's wrappers of it said at WARNING and up, and as text."""
    said = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING
        and r.name.startswith(KOPFS)
        and "not in the main thread" not in r.getMessage()  # kopf's, in a test's thread
    ]
    return said, "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in said)


def test_a_listing_failed_past_kopfs_retries_is_made_again_and_the_operator_goes_on(
    operator_stack: Stack,
    namespace: str,
    short_backoffs: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stack, ns = operator_stack, namespace
    consumer_of_two_pods(stack, ns)
    failing = stack.kube.handler[
        "list", kmock.resource("eventhub-balancer.dev/v1alpha1/eventhubconsumers"), by_kopf
    ][:FAILED]
    failing << 503 << UNAVAILABLE
    with caplog.at_level(logging.INFO):
        operator = stack.start_operator(namespaces=(ns,))
        with ConsumerDouble(stack.kube, ns):
            wait_for(lambda: sorted(stack.counts(ns).values()) == [16, 16], what="2 x 16")
            wait_for(lambda: stack.balanced(ns), what="balanced")
    assert operator.error is None
    assert len(failing) == FAILED  # all of them answered, then the listing went through
    said, text = said_by_kopf(caplog)
    # One warning that kopf's requests fail and are retried; no error, no traceback.
    assert [r.levelno for r in said] == [logging.WARNING], text
    assert "fail and are retried" in said[0].getMessage(), text
    assert "leader changed" in said[0].getMessage(), text
    assert not [r for r in said if r.exc_info], text


#: What kube-apiserver sends in a watch whose resource version its watch cache has not reached
#: yet (an API server that restarted, or lags the one the version came from).
TOO_LARGE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Timeout: Too large resource version: 1000000, current: 20",
        "reason": "Timeout",
        "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large"}]},
        "code": 504,
    },
}


def test_an_error_event_in_a_watch_is_one_warning_and_the_watch_is_made_again(
    operator_stack: Stack,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kopf takes an error event other than a 410 for the end of its watch, and stopped."""
    stack, ns = operator_stack, namespace
    consumer_of_two_pods(stack, ns)
    erring = stack.kube.handler["watch", kmock.resource("v1/pods"), by_kopf][:1]
    erring << (TOO_LARGE,)
    with caplog.at_level(logging.INFO):
        operator = stack.start_operator(namespaces=(ns,))
        with ConsumerDouble(stack.kube, ns):
            wait_for(lambda: len(erring) == 1, what="the error event sent")
            wait_for(lambda: sorted(stack.counts(ns).values()) == [16, 16], what="2 x 16")
            wait_for(lambda: stack.balanced(ns), what="balanced")
            stack.delete_pod(ns, "c-1")  # seen through the watch made again
            wait_for(lambda: sorted(stack.counts(ns).values()) == [32], what="1 x 32")
    assert operator.error is None
    said, text = said_by_kopf(caplog)
    assert [r.levelno for r in said] == [logging.WARNING], text
    assert "Too large resource version" in said[0].getMessage(), text
    assert "listed and watched again" in said[0].getMessage(), text
