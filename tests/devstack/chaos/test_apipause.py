"""Pausing the local Kubernetes API: the chaos run's control-plane outage (``apipause``)."""

from __future__ import annotations

import http.client
import threading
import urllib.error
import urllib.request

import pytest

from eventhub_balancer_devstack.kube import apiservers

EXEMPT = "kubelet-token"


def _paused(api: apiservers.LocalKubeAPI) -> bool:
    return api.paused


def _get(url: str, *, token: str = "admin", timeout: float = 2.0) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return int(response.status)


def _answered_once_resumed(api: apiservers.LocalKubeAPI, url: str) -> None:
    """A GET of ``url`` hangs (half a second without an answer), and is answered 200 once
    ``api`` resumes."""
    answers: list[int] = []
    waiter = threading.Thread(target=lambda: answers.append(_get(url, timeout=10)))
    waiter.start()
    waiter.join(timeout=0.5)
    assert answers == []
    api.resume()
    waiter.join(timeout=10)
    assert answers == [200]


@pytest.mark.timeout(30)
def test_paused_requests_hang_until_resumed_and_exempt_ones_pass() -> None:
    with apiservers.LocalKubeAPI() as api:
        url = f"{api.url}/api/v1/namespaces/default/configmaps"
        assert _get(url) == 200
        api.pause(exempt_tokens=[EXEMPT])
        assert _paused(api)
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            _get(url, timeout=0.5)
        assert _get(url, token=EXEMPT) == 200
        # A request held while paused is answered once the server resumes.
        _answered_once_resumed(api, url)
        assert not _paused(api)
        assert _get(url) == 200


@pytest.mark.timeout(30)
def test_pausing_drops_the_watch_streams() -> None:
    with apiservers.LocalKubeAPI() as api:
        url = f"{api.url}/api/v1/namespaces/default/configmaps?watch=true"
        request = urllib.request.Request(url, headers={"Authorization": "Bearer admin"})
        ended = threading.Event()

        def watch() -> None:
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
            except (OSError, ValueError, http.client.HTTPException):
                pass
            ended.set()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        assert not ended.wait(1.0), "the watch ended on its own"
        api.pause()
        assert ended.wait(5.0), "the watch was not dropped"
        api.resume()


@pytest.mark.timeout(30)
def test_held_requests_of_one_path_hang_and_the_others_are_answered() -> None:
    with apiservers.LocalKubeAPI() as api:
        events = f"{api.url}/api/v1/namespaces/default/events"
        configmaps = f"{api.url}/api/v1/namespaces/default/configmaps"
        api.hold("/events")
        assert not _paused(api)  # the server as a whole answers
        assert _get(configmaps) == 200
        _answered_once_resumed(api, events)
        assert _get(events) == 200
