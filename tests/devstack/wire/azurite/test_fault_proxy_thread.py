"""The fault proxy in a thread of its own (``with FaultProxy(...)``), as the chaos run uses it."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from eventhub_balancer_devstack import azurite as azurite_launcher
from eventhub_balancer_devstack import faultproxy

#: The bound of every request in these tests (seconds).
TIMEOUT = 5.0


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_forwards_and_injects_from_its_own_thread(azurite: azurite_launcher.Azurite) -> None:
    path = "/devstoreaccount1?comp=list"
    direct = status_of(f"http://127.0.0.1:{azurite.port}{path}")
    with faultproxy.FaultProxy(azurite.port) as proxy:
        assert status_of(f"{proxy.url}{path}") == direct
        proxy.faults.set(status_5xx_rate=1.0, seed=1)
        assert status_of(f"{proxy.url}{path}") in (500, 503)
        stats = proxy.faults.stats
        assert (stats.forwarded, stats.injected_5xx) == (1, 1)
    with pytest.raises(RuntimeError, match="not started"):
        _ = proxy.port


def test_stopping_twice_is_harmless(azurite: azurite_launcher.Azurite) -> None:
    proxy = faultproxy.FaultProxy(azurite.port).start_in_thread()
    url = proxy.url
    proxy.stop_thread()
    proxy.stop_thread()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=TIMEOUT)
