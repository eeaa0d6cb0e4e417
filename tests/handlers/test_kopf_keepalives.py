"""kopf's peering keep-alive outlives a minute of refused renewals (`handlers.kopfkeepalives`).

kopf retries each renewal of the replica's peering entry through its error backoffs, then
ends the keep-alive for good while the replica runs on: after an API server that throttled
(429) the renewals for about a minute, the active replica never renewed its entry again, so
once it expired the standby resumed too and both stayed active (replayed against the local API
server with two replicas). Here kopf's own keep-alive runs on fake time over a patch that the
API server refuses as kopf would have it after its retries, then takes.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import errors as kopf_errors
from kopf._core.engines import peering

from eventhub_balancer.handlers import kopfkeepalives, kopfwiring

pytestmark = pytest.mark.looptime

THROTTLED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Too many requests, please try again later.",
    "reason": "TooManyRequests",
    "details": {"retryAfterSeconds": 1},
    "code": 429,
}
#: The renewals kopf gives up on, one after another (each after its own retries).
REFUSED = 3


class PeeringObject:
    """The KopfPeering object as kopf's patches reach it: the first `REFUSED` refused."""

    def __init__(self) -> None:
        self.patches: list[tuple[float, Any]] = []
        self.refused = 0

    async def patch_obj(self, **kwargs: Any) -> tuple[dict[str, Any], None]:
        self.patches.append((asyncio.get_running_loop().time(), kwargs["patch"]))
        if self.refused < REFUSED:
            self.refused += 1
            raise kopf_errors.APITooManyRequestsError(
                THROTTLED, status=429, headers={"Retry-After": "1"}
            )
        return {"status": {}}, None


def patched_through(monkeypatch: pytest.MonkeyPatch, target: PeeringObject) -> None:
    """kopf's own peering writes, their patches going to ``target``."""
    monkeypatch.setattr(peering.patching, "patch_obj", target.patch_obj)
    monkeypatch.setattr(peering, "touch", kopfkeepalives.STOCK_TOUCH)
    monkeypatch.setattr(peering, "clean", kopfkeepalives.STOCK_CLEAN)


@pytest.fixture
def peering_object(monkeypatch: pytest.MonkeyPatch) -> PeeringObject:
    kept = PeeringObject()
    patched_through(monkeypatch, kept)
    return kept


def settings() -> kopf.OperatorSettings:
    configured = kopf.OperatorSettings()
    kopfwiring.configure(
        configured, peering_name="ehb", standalone=False, clusterwide=False, priority=10
    )
    return configured


PEERINGS = kopf.Resource("kopf.dev", "v1", "kopfpeerings", namespaced=True)


async def keep_alive(seconds: float) -> asyncio.Task[Any]:
    task = asyncio.create_task(
        peering.keepalive(
            namespace="ops",
            resource=PEERINGS,
            identity=peering.Identity("replica-a"),
            settings=settings(),
        )
    )
    await asyncio.sleep(seconds)
    return task


async def test_the_keepalive_renews_again_after_renewals_were_refused(
    peering_object: PeeringObject,
) -> None:
    kopfkeepalives.install()
    task = await keep_alive(REFUSED * kopfwiring.PEERING_LIFETIME_SECONDS + 30)
    try:
        assert not task.done(), task.exception() if task.done() else None
        entries = [patch["status"]["replica-a"] for _, patch in peering_object.patches]
        # Renewed again once the API server took it, the entry alive in every renewal.
        assert len(entries) > REFUSED + 1
        assert all(entry is not None and entry["priority"] == 10 for entry in entries)
        # At the keep-alive's pace, never faster: 5 to 10 s before the lifetime ends.
        times = [t for t, _ in peering_object.patches]
        assert all(b - a >= 5 for a, b in itertools.pairwise(times)), times
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_kopfs_own_keepalive_ends_for_good_at_the_first_refused_renewal(
    peering_object: PeeringObject,
) -> None:
    """What the wrapper is for: kopf's keep-alive stops renewing (if kopf fixes it, drop ours)."""
    task = await keep_alive(REFUSED * kopfwiring.PEERING_LIFETIME_SECONDS + 30)
    assert task.done()
    assert isinstance(task.exception(), kopf_errors.APITooManyRequestsError)
    # The one renewal, and kopf's removal of its own entry on the way out: nothing after.
    assert len(peering_object.patches) == 2


def peering_event(**entries: datetime.datetime) -> dict[str, Any]:
    """The KopfPeering object as a watch event brings it: each replica last seen then."""
    status = {
        identity: {"priority": 10, "lifetime": 15, "lastseen": seen.isoformat()}
        for identity, seen in entries.items()
    }
    return {"type": "MODIFIED", "object": {"metadata": {"name": "ehb"}, "status": status}}


async def observe(event: dict[str, Any]) -> None:
    await peering.process_peering_event(
        raw_event=event,  # type: ignore[arg-type]
        namespace="ops",
        resource=kopf.Resource("kopf.dev", "v1", "kopfpeerings", namespaced=True),
        identity=peering.Identity("replica-a"),
        settings=settings(),
    )


async def test_a_refused_write_on_a_change_of_the_peering_object_stops_nothing(
    peering_object: PeeringObject,
) -> None:
    """Another replica's entry gone long ago (kopf removes it) and one of the same priority
    about to expire (kopf renews its own once it has): both writes refused."""
    kopfkeepalives.install()
    now = datetime.datetime.now(datetime.UTC)
    event = peering_event(**{"replica-gone": now - datetime.timedelta(hours=1), "replica-b": now})
    await asyncio.wait_for(observe(event), 60)  # raised nothing: the operator goes on
    written = [patch["status"] for _, patch in peering_object.patches]
    assert written[0] == {"replica-gone": None}  # the removal, refused
    assert written[1]["replica-a"]["priority"] == 10  # the renewal, refused
    assert peering_object.refused == 2


async def test_kopf_stops_at_a_refused_write_on_a_change_of_the_peering_object(
    peering_object: PeeringObject,
) -> None:
    """What the wrapper is for: kopf lets the refusal out of its observer, which stops it."""
    now = datetime.datetime.now(datetime.UTC)
    with pytest.raises(kopf_errors.APITooManyRequestsError):
        await observe(peering_event(**{"replica-gone": now - datetime.timedelta(hours=1)}))


class MissingPeeringObject(PeeringObject):
    """No peering object until `create`: a patch of it finds nothing (kopf's ``None``)."""

    def __init__(self) -> None:
        super().__init__()
        self.exists = False

    async def patch_obj(self, **kwargs: Any) -> tuple[dict[str, Any] | None, None]:
        self.patches.append((asyncio.get_running_loop().time(), kwargs["patch"]))
        return ({"status": {}} if self.exists else None), None


@pytest.fixture
def missing_object(monkeypatch: pytest.MonkeyPatch) -> MissingPeeringObject:
    missing = MissingPeeringObject()
    patched_through(monkeypatch, missing)
    return missing


async def test_a_missing_peering_object_is_said_with_what_to_do_and_when_it_is_back(
    missing_object: MissingPeeringObject, caplog: pytest.LogCaptureFixture
) -> None:
    """kopf keeps a replica whose peering object is missing paused, and said so at DEBUG."""
    caplog.set_level(logging.INFO, logger=kopfkeepalives.__name__)
    kopfkeepalives.install()
    task = await keep_alive(3 * kopfkeepalives.MISSING_REMINDER_SECONDS - 1)
    try:
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        # One line at the first renewal, a warning at the second, then once per reminder,
        # where about 200 renewals went.
        assert len(missing_object.patches) > 150
        assert caplog.messages[0] == (
            "the peering object KopfPeering ops/ehb is not there yet: this replica waits for "
            "it, paused"
        )
        assert [r.getMessage() for r in warned] == [
            "the peering object KopfPeering ops/ehb does not exist: this replica stays paused, "
            "and serves no consumer, until it does; create it (manifests/peering/peering.yaml, "
            "or the chart's peering.enabled) or run the operator with --standalone"
        ] * 3
        caplog.clear()
        missing_object.exists = True
        await asyncio.sleep(3 * kopfwiring.PEERING_LIFETIME_SECONDS)
        assert caplog.messages == [
            "the peering object KopfPeering ops/ehb exists: this replica takes part again"
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Leaving (kopf's renewal with lifetime 0) says nothing, the object there or not.
    missing_object.exists = False
    caplog.clear()
    await peering.touch(
        identity=peering.Identity("replica-a"),
        settings=settings(),
        resource=PEERINGS,
        namespace="ops",
        lifetime=0,
    )
    assert caplog.messages == []


async def test_a_peering_object_created_beside_the_replica_is_no_warning(
    missing_object: MissingPeeringObject, caplog: pytest.LogCaptureFixture
) -> None:
    """A Helm install creates the object with the operator's pods: a pod that starts first
    misses it at its first renewal and finds it soon after, which is no cause to warn. Its
    entry is written within half a second of the object's creation: kopf resumes every replica
    when the object is created, and until the entries are written every replica acted (7 s on
    the real control plane, until the next renewal)."""
    caplog.set_level(logging.INFO, logger=kopfkeepalives.__name__)
    kopfkeepalives.install()
    started = asyncio.get_running_loop().time()
    task = await keep_alive(1.2)
    try:
        missing_object.exists = True
        created = asyncio.get_running_loop().time()
        await asyncio.sleep(3 * kopfwiring.PEERING_LIFETIME_SECONDS)
        first_found = min(t for t, _ in missing_object.patches if t >= created)
        assert first_found - created <= kopfkeepalives.FIRST_MISS_PACE_S
        asked_first = [t for t, _ in missing_object.patches if t < created]
        assert len(asked_first) <= 1 + kopfkeepalives.FIRST_MISS_WAIT_S / 0.5  # bounded
        assert asked_first[0] == pytest.approx(started, abs=0.01)
        assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
            (
                logging.INFO,
                "the peering object KopfPeering ops/ehb is not there yet: this replica waits "
                "for it, paused",
            ),
            (
                logging.INFO,
                "the peering object KopfPeering ops/ehb exists: this replica takes part again",
            ),
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_renewal_writes_what_kopfs_own_writes(
    missing_object: MissingPeeringObject,
) -> None:
    """`Renewals.touch` stands in for kopf's: the same patch of the same object, alive and
    leaving. A kopf that changes its renewal fails here, and the stand-in is written again."""
    missing_object.exists = True
    for lifetime in (None, 0):
        for touch in (kopfkeepalives.STOCK_TOUCH, kopfkeepalives.Renewals().touch):
            await touch(
                identity=peering.Identity("replica-a"),
                settings=settings(),
                resource=PEERINGS,
                namespace="ops",
                lifetime=lifetime,
            )
    written = [patch for _, patch in missing_object.patches]
    assert len(written) == 4
    for kopfs, ours in (written[0:2], written[2:4]):
        assert unseen(ours) == unseen(kopfs)  # each stamps its own moment
    assert written[0]["status"]["replica-a"]["priority"] == 10
    assert written[2]["status"]["replica-a"] is None


def unseen(patch: Any) -> Any:
    """A renewal's patch without the moment it was made."""
    return {
        identity: entry and {k: v for k, v in entry.items() if k != "lastseen"}
        for identity, entry in patch["status"].items()
    }


def test_the_peering_object_is_named_as_kubectl_names_it() -> None:
    assert kopfkeepalives.object_name("ops", "ehb") == "KopfPeering ops/ehb"
    assert kopfkeepalives.object_name(None, "ehb") == "ClusterKopfPeering ehb"
