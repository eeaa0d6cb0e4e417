"""A login that cannot take the operator's credentials is one line each time, and is asked
again at a growing pace until the credentials come back.

kopf logs in at its start and again after a 401: an operator whose ServiceAccount token file
went missing or empty, or whose kubeconfig's exec plugin failed, made kopf log the loader's
traceback at every attempt, naming neither the credentials nor what to check. Here kopf's
own authentication activity runs the registry's login on fake loop time (looptime); the
in-cluster loader is the Kubernetes client's own.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import types
from pathlib import Path
from typing import Any

import kopf
import kubernetes
import pytest
from kopf._core.engines import activities, indexing
from kopf._core.intents import causes

from eventhub_balancer.adapters import kubeclients
from eventhub_balancer.handlers import kopfwiring, registering
from tests.adapters.test_kube_logins import TOKEN, in_a_pod  # noqa: F401  # a fixture
from tests.support import fakes

SERVER = "https://10.96.0.1:443"


class Credentials:
    """The operator's connection: fails ``failing`` times, then answers."""

    def __init__(self, failing: int, error: Exception) -> None:
        self.failing = failing
        self.error = error
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.calls <= self.failing:
            raise self.error
        return kubeclients.ConnectionInfo(
            server=SERVER,
            ca_path=None,
            insecure=False,
            scheme="Bearer",
            token=TOKEN,
            certificate_path=None,
            private_key_path=None,
        )


def registry_for(connection: Any) -> kopf.OperatorRegistry:
    operator = registering.Operator(
        kube=fakes.FakeKube(),
        hubs=fakes.FakeHubs(store=fakes.FakeCheckpointStore()),
        connection=connection,
    )
    return kopfwiring.build_registry(operator)


async def log_in(registry: kopf.OperatorRegistry) -> dict[Any, Any]:
    """kopf's authentication activity, as it runs at start and after a 401."""
    return await activities.run_activity(
        lifecycle=kopf.lifecycles.all_at_once,
        registry=registry,
        settings=kopf.OperatorSettings(),
        activity=causes.Activity.AUTHENTICATION,
        indices=indexing.OperatorIndexers().indices,
        memo=kopf.Memo(),
    )


@pytest.mark.looptime
async def test_a_failing_login_is_one_line_each_time_and_retried_sooner_than_kopf_would(
    caplog: pytest.LogCaptureFixture,
) -> None:
    credentials = Credentials(6, FileNotFoundError(2, "No such file or directory"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with caplog.at_level(logging.ERROR, logger="kopf"):
        results = await log_in(registry_for(credentials))
    [info] = results.values()
    assert info.server == SERVER
    assert info.as_http_headers() == {"Authorization": f"Bearer {TOKEN}"}
    # 1 s, then 2, 4 and 8, then every 15 s: not kopf's 60 s.
    assert loop.time() - started == pytest.approx(1 + 2 + 4 + 8 + 15 + 15)
    failed = [r for r in caplog.records if r.name.startswith("kopf")]
    assert len(failed) == 6
    for record, delay in zip(failed, (1, 2, 4, 8, 15, 15), strict=True):
        text = record.getMessage()
        assert record.exc_info is None  # no traceback
        assert "\n" not in text
        assert "cannot take the operator's Kubernetes credentials" in text
        assert "FileNotFoundError: [Errno 2] No such file or directory" in text
        assert f"tried again in {delay} s" in text


@pytest.mark.looptime
async def test_the_pace_starts_again_after_a_login_that_succeeded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    credentials = Credentials(2, RuntimeError("exec: process returned 1"))
    registry = registry_for(credentials)
    await log_in(registry)
    credentials.failing, credentials.calls = 1, 0
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="kopf"):
        await log_in(registry)
    [record] = [r for r in caplog.records if r.name.startswith("kopf")]
    assert "tried again in 1 s" in record.getMessage()


def test_a_token_file_gone_empty_in_a_pod_is_named(
    in_a_pod: Path,  # noqa: F811  # the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Kubernetes client's in-cluster loader reads the token file again once a minute; an
    empty file there is its ``ConfigException``."""
    client = kubeclients.KubeClient.from_environment()
    try:
        in_a_pod.write_text("")

        real = datetime.datetime

        class Later(real):
            @classmethod
            def now(cls, tz: Any = None) -> Any:
                return real.now(tz) + datetime.timedelta(minutes=2)

        # The loader's clock, two minutes on: past the minute its token is read again after.
        monkeypatch.setattr(
            kubernetes.config.incluster_config,
            "datetime",
            types.SimpleNamespace(datetime=Later, timedelta=datetime.timedelta),
        )
        [login] = registry_for(client.connection_info)._activities.get_all_handlers()
        with pytest.raises(kopf.TemporaryError) as e:
            login.fn()
    finally:
        client.close()
    assert e.value.delay == 1.0
    assert "(ConfigException: Token file exists but empty.)" in str(e.value)
    assert "ServiceAccount token" in str(e.value)
