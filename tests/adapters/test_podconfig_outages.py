"""The pod's ConfigMap watch rides out control-plane outages, on fake time.

``PodConfigMaps.watch`` must never give up because the API server is unreachable: fencing
makes it safe for a pod to go on with its last assignment, so the watch yields nothing during
an outage and reconnects with backoff capped at ``podreconnects.RECONNECT_BACKOFF_MAX_S``;
refused credentials too, said once with the fix. The API calls (``_list``, ``_watch_once``)
are faked on the loop's clock and each watch session runs inline instead of in a thread, so
that a ten-minute outage takes milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import exceptions as k8s_errors

from eventhub_balancer import errors
from eventhub_balancer.adapters import podconfig, podreconnects
from eventhub_balancer.contracts import configmaps

pytestmark = pytest.mark.looptime

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

#: As the operator writes it: the pod refuses any other (``configmaps.refusal``).
CONFIGMAP = {
    "metadata": {
        "name": configmaps.configmap_name(consumer="orders", pod="pod-a"),
        "labels": configmaps.labels(consumer="orders", pod="pod-a"),
    },
    "data": {"consumer": "orders", "pod": "pod-a", "generation": "1"},
}


class FakeApi:
    """The API server as ``_list`` and ``_watch_once`` see it: down or refusing in spans of
    the loop's time, and a log of every request."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.down: list[tuple[float, float, Callable[[], Exception]]] = []
        self.requests: list[tuple[float, str]] = []
        self.watch_outcome: Callable[[], Exception] = ConnectionResetError

    def fail(self, start: float, end: float, error: Callable[[], Exception]) -> None:
        self.down.append((start, end, error))

    def _check(self, what: str) -> None:
        now = self.loop.time()
        self.requests.append((now, what))
        for start, end, error in self.down:
            if start <= now < end:
                raise error()

    def list(self) -> tuple[list[dict[str, Any]], str]:
        self._check("list")
        return [CONFIGMAP], "1"

    def watch_once(self, put: Any, stop: threading.Event, version: str) -> str:
        # A session runs inline here, so a healthy watch cannot block: it ends as if the
        # connection dropped, and the next session lists again.
        self._check("watch")
        raise self.watch_outcome()


def client(tmp_path: Path, api: FakeApi) -> podconfig.PodConfigMaps:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    maps = podconfig.PodConfigMaps(
        namespace="shop",
        consumer="orders",
        pod="pod-a",
        kubeconfig=str(kubeconfig),
        spawn=lambda session: session(),
    )
    maps._list = api.list  # type: ignore[method-assign]
    maps._watch_once = api.watch_once  # type: ignore[method-assign]
    return maps


async def follow(maps: podconfig.PodConfigMaps, *, seconds: float) -> None:
    """Consume the watch until it raises (or ``seconds`` of loop time pass)."""
    async with asyncio.timeout(seconds):
        async for _ in maps.watch():
            pass


def refused(status: int) -> Callable[[], Exception]:
    return lambda: k8s_errors.ApiException(status=status, reason="refused")


async def test_a_ten_minute_outage_never_ends_the_watch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    api = FakeApi(loop)
    api.fail(start + 1, start + 601, ConnectionRefusedError)
    maps = client(tmp_path, api)
    seen: list[float] = []
    caplog.set_level(logging.INFO, logger=podconfig.__name__)

    async with asyncio.timeout(3600):
        async for body in maps.watch():
            assert body == CONFIGMAP
            seen.append(loop.time() - start)
            if loop.time() >= start + 601:
                break

    assert seen[0] == 0  # the assignment at once
    assert 601 <= seen[-1] <= 601 + podreconnects.RECONNECT_BACKOFF_MAX_S
    times = [t for t, _ in api.requests if start + 1 <= t < start + 601]
    pauses = [b - a for a, b in itertools.pairwise(times)]
    assert max(pauses) <= podreconnects.RECONNECT_BACKOFF_MAX_S
    assert len(times) <= 600 / podreconnects.RECONNECT_BACKOFF_MAX_S + 10  # backed off, bounded
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) <= 600 / podreconnects.OUTAGE_LOG_EVERY_S + 2  # a bounded log rate
    assert any("again after" in r.getMessage() for r in caplog.records)
    maps.close()


async def test_the_backoff_starts_short_and_is_capped() -> None:
    reconnects = podreconnects.Reconnects()
    pauses = [reconnects.after_failure(ConnectionRefusedError(), now=0.0) for _ in range(20)]
    assert pauses[0] == podreconnects.RECONNECT_BACKOFF_S
    assert pauses == sorted(pauses)
    assert pauses[-1] == podreconnects.RECONNECT_BACKOFF_MAX_S
    assert reconnects.reachable(now=42.0) == 42.0
    assert not reconnects.down
    # Answering a list is not enough: a server that drops every watch is still backed off.
    assert reconnects.after_failure(ConnectionRefusedError(), now=43.0) == pauses[-1]
    reconnects.healthy()
    assert (
        reconnects.after_failure(ConnectionRefusedError(), now=50.0)
        == podreconnects.RECONNECT_BACKOFF_S
    )


@pytest.mark.parametrize(
    ("status", "fix"),
    [(403, "needs list, watch and patch on configmaps"), (401, "delete the pod")],
)
async def test_refused_credentials_never_end_the_watch_and_are_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, status: int, fix: str
) -> None:
    """Ten minutes of refusals (a RoleBinding pruned until the next GitOps sync): the third
    refusal used to end the watch, and with it the pod."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    api = FakeApi(loop)
    api.fail(start + 1, start + 601, refused(status))
    maps = client(tmp_path, api)
    caplog.set_level(logging.INFO, logger=podconfig.__name__)
    seen: list[float] = []

    async with asyncio.timeout(3600):
        async for _ in maps.watch():
            seen.append(loop.time() - start)
            if loop.time() >= start + 601:
                break

    assert 601 <= seen[-1] <= 601 + podreconnects.RECONNECT_BACKOFF_MAX_S
    assert maps.reconnects.refusal is None  # a list answered again
    times = [t for t, _ in api.requests if start + 1 <= t < start + 601]
    assert len(times) <= 600 / podreconnects.RECONNECT_BACKOFF_MAX_S + 10  # backed off
    said = [r for r in caplog.records if f"HTTP {status}" in r.getMessage()]
    assert all(r.levelno == logging.ERROR and fix in r.getMessage() for r in said), said
    # Once, then a reminder every five minutes.
    assert 1 <= len(said) <= 600 / podreconnects.REFUSAL_LOG_EVERY_S + 1
    assert any("again after" in r.getMessage() for r in caplog.records)
    maps.close()


async def test_a_refusal_stands_only_after_several_in_a_row(tmp_path: Path) -> None:
    """A token being rotated may be refused once; an outage in between starts the count
    again."""
    reconnects = podreconnects.Reconnects()
    forbidden = refused(403)()
    for now in range(podreconnects.AUTH_FAILURES_LIMIT - 1):
        reconnects.after_failure(forbidden, now=float(now))
        assert reconnects.refusal is None
        assert not reconnects.should_say_refusal(now=float(now))
    reconnects.after_failure(ConnectionRefusedError(), now=5.0)
    reconnects.after_failure(forbidden, now=6.0)
    assert reconnects.refusal is None
    for now in range(7, 7 + podreconnects.AUTH_FAILURES_LIMIT):
        reconnects.after_failure(forbidden, now=float(now))
    assert reconnects.refusal is forbidden
    assert reconnects.should_say_refusal(now=10.0)
    assert not reconnects.should_say_refusal(now=11.0)
    reconnects.reachable(now=12.0)  # a list answered: the pod reads its ConfigMap
    assert reconnects.refusal is None


async def test_a_gone_watch_lists_again_without_counting_a_failure(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    api = FakeApi(loop)
    script: list[Exception | None] = [None, k8s_errors.ApiException(status=410, reason="Gone")]

    def watch_once(put: Any, stop: threading.Event, version: str) -> str:
        outcome = script.pop(0) if script else ConnectionResetError()
        if outcome is None:
            return version  # the server ended the watch after its timeout: healthy
        raise outcome

    maps = client(tmp_path, api)
    maps._watch_once = watch_once  # type: ignore[method-assign]
    lists: list[float] = []
    async with asyncio.timeout(60):
        async for _ in maps.watch():
            lists.append(loop.time())
            if len(lists) == 2:
                break
    # The 410 came after a healthy watch: listed again at once, no backoff.
    assert lists[1] - lists[0] < podreconnects.RECONNECT_BACKOFF_S
    assert maps.reconnects.failures == 0
    maps.close()


def gone() -> k8s_errors.ApiException:
    return k8s_errors.ApiException(status=410, reason="Gone")


async def watch_lists(tmp_path: Path, script: list[Exception | None], count: int) -> Any:
    """The loop times of the first ``count`` lists while each watch follows ``script`` (None:
    a watch that ended after its time-out, healthy), and the client."""
    loop = asyncio.get_running_loop()

    def watch_once(put: Any, stop: threading.Event, version: str) -> str:
        outcome = script.pop(0) if script else gone()
        if outcome is None:
            return version
        raise outcome

    maps = client(tmp_path, FakeApi(loop))
    maps._watch_once = watch_once  # type: ignore[method-assign]
    lists: list[float] = []
    async with asyncio.timeout(60):
        async for _ in maps.watch():
            lists.append(loop.time())
            if len(lists) == count:
                break
    maps.close()
    return lists, maps


async def test_a_list_compacted_before_its_first_watch_lists_again_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The version listed was compacted before the first watch from it began (a busy pod, or
    # etcd compacting right then): a race, not an outage. It was a failure, with a warning
    # and the backoff (tests/realkube/wire/test_pod_watch_gone.py met it on a loaded machine).
    with caplog.at_level(logging.WARNING, logger=podconfig.__name__):
        lists, maps = await watch_lists(tmp_path, [gone(), None], 2)
    assert lists[1] - lists[0] < podreconnects.RECONNECT_BACKOFF_S
    assert maps.reconnects.failures == 0
    assert [r.getMessage() for r in caplog.records if "failed" in r.getMessage()] == []


async def test_lists_gone_before_every_first_watch_back_off(tmp_path: Path) -> None:
    # A server that answers every watch 410 at once would make a list a turn otherwise: a
    # session lists again at once once, then backs off as for a failure.
    lists, maps = await watch_lists(tmp_path, [], 7)
    gaps = [b - a for a, b in itertools.pairwise(lists)]
    slow = [gap >= podreconnects.RECONNECT_BACKOFF_S for gap in gaps]
    assert slow == [False, True] * 3, gaps
    assert maps.reconnects.failures == 3


async def test_acknowledgements_during_an_outage_never_hold_the_caller_up(
    tmp_path: Path,
) -> None:
    loop = asyncio.get_running_loop()
    maps = client(tmp_path, FakeApi(loop))
    patches: list[float] = []

    def unreachable(annotations: Any) -> None:
        patches.append(loop.time())
        raise ConnectionRefusedError()

    maps._patch = unreachable  # type: ignore[method-assign]
    maps.reconnects.after_failure(ConnectionRefusedError(), now=loop.time())  # the watch is down
    start = loop.time()
    failed = 0
    while loop.time() < start + 12:
        with pytest.raises(errors.TransientError):
            await maps.annotate({"a": "b"})
        failed += 1
        await asyncio.sleep(0.5)  # the runtime's turn
    assert failed >= 20
    assert 2 <= len(patches) <= 12 / podconfig.ANNOTATE_RETRY_DOWN_S + 1  # spaced, not each turn

    maps.reconnects.reachable(now=loop.time())  # the watch is back: no more spacing

    def answered(annotations: Any) -> str:
        patches.append(loop.time())
        return "7"  # the ConfigMap's resourceVersion once patched

    maps._patch = answered  # type: ignore[method-assign]
    assert await maps.annotate({"a": "b"}) == "7"
    maps.close()


async def test_watches_that_always_fail_after_a_list_are_logged_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Lists answered, every watch broken (a proxy that breaks streamed answers, watches
    throttled): each list ended the outage in the log and each broken watch began a new
    one, a warning and a recovery per reconnect for as long as it lasted (50 lines in ten
    minutes)."""
    loop = asyncio.get_running_loop()
    api = FakeApi(loop)  # lists work; every watch fails at once
    maps = client(tmp_path, api)
    caplog.set_level(logging.INFO, logger=podconfig.__name__)
    with contextlib.suppress(TimeoutError):
        await follow(maps, seconds=600)
    said = [r for r in caplog.records if "watching ConfigMap" in r.getMessage()]
    warnings = [r for r in said if r.levelno == logging.WARNING]
    assert 1 <= len(warnings) <= 600 / podreconnects.OUTAGE_LOG_EVERY_S + 1
    assert len(said) - len(warnings) <= len(warnings)  # a recovery only after a warning
    assert "failed" in warnings[-1].getMessage()
    assert len([t for t, what in api.requests if what == "watch"]) >= 600 / 30  # still tried
    maps.close()
