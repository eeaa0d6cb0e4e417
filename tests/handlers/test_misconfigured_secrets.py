"""A connection string in a CR's Secret that can never work is a configuration error: the
condition says which Secret, what is wrong and what to write there (never the value), and the
operator waits the longest backoff for it, or until the spec points elsewhere, instead of
asking again at the transient pace.

Over the in-memory ports; time is the ``now`` each cycle is given.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import endpoints, storeaddresses
from eventhub_balancer.handlers import cycles, memories
from eventhub_balancer.reconciling import deadlines
from tests.handlers import test_cycles
from tests.support import fakes

T0, NS, NAME = test_cycles.T0, test_cycles.NS, test_cycles.NAME
SPEC: dict[str, Any] = {**test_cycles.SPEC, "balancing": {"intervalSeconds": 5}}
SECRET_KEY = "c2VjcmV0LWtleQ"  # what must never be shown
VALID_EVENTHUB = (
    f"Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey={SECRET_KEY}"
)
VALID_BLOB = f"AccountName=shop;AccountKey={SECRET_KEY};EndpointSuffix=core.windows.net"
WAIT = deadlines.MAX_BACKOFF_SECONDS


class PolicedHubs(fakes.FakeHubs):
    """The fake behind the port, checking hosts as the real adapter does before it dials."""

    policy = endpoints.EndpointPolicy()

    async def partitions(self, **kwargs: Any) -> tuple[tuple[str, ...], bool]:
        self.policy.check_eventhub(
            fully_qualified_namespace=kwargs["fully_qualified_namespace"],
            connection_string=kwargs["connection_string"],
        )
        return await super().partitions(**kwargs)

    async def checkpoints(self, address: storeaddresses.StoreAddress) -> dict[str, tuple[int, int]]:
        self.policy.check_blob(
            account_url=address.account_url, connection_string=address.connection_string
        )
        return await super().checkpoints(address)


def make_kube(
    *, eventhub: str = VALID_EVENTHUB, blob: str = VALID_BLOB, namespace: str = ""
) -> fakes.FakeKube:
    """The consumer, its Secrets and two pods; ``namespace`` replaces the spec's Event Hubs
    namespace (the one the string names, where it names another than shop's)."""
    kube = fakes.FakeKube()
    spec = copy.deepcopy(SPEC)
    if namespace:
        spec["eventHub"]["fullyQualifiedNamespace"] = namespace
    kube.add_consumer(NS, NAME, spec)
    kube.add_secret(NS, "eh", {"cs": eventhub})
    kube.add_secret(NS, "blob", {"cs": blob})
    for name in ("a", "b"):
        kube.add_pod(NS, name, labels={"app": "c"}, since=T0)
    return kube


@pytest.fixture
def hubs() -> PolicedHubs:
    return PolicedHubs(store=fakes.FakeCheckpointStore())


async def cycle(
    kube: fakes.FakeKube, hubs: fakes.FakeHubs, memory: memories.Memory, *, now: float
) -> cycles.Result:
    return await cycles.run_cycle(
        kube=kube,
        hubs=hubs,
        namespace=NS,
        name=NAME,
        memory=memory,
        now=T0 + datetime.timedelta(seconds=now),
    )


def wall(seconds: float) -> float:
    return (T0 + datetime.timedelta(seconds=seconds)).timestamp()


def shown(kube: fakes.FakeKube, type_: str) -> dict[str, Any]:
    condition = kube.condition(NS, NAME, type_)
    assert "\n" not in condition["message"]
    assert SECRET_KEY not in condition["message"]
    assert all(SECRET_KEY not in str(e) for e in kube.events)
    return condition


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("garbage", "part 1 of 1 is not Key=Value"),
        (f"SharedAccessKeyName=l;SharedAccessKey={SECRET_KEY}", "it has no Endpoint"),
        (
            f"Endpoint=https://shop.servicebus.windows.net/;SharedAccessKey={SECRET_KEY}",
            "its Endpoint is not an sb:// URL",
        ),
        (f"{SECRET_KEY}=;Endpoint=sb://shop.servicebus.windows.net/", "part 1 of 2"),
    ],
)
async def test_a_malformed_eventhub_string_says_which_secret_and_what_to_write(
    hubs: PolicedHubs, value: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    kube = make_kube(eventhub=value)
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    condition = shown(kube, "EventHubReachable")
    assert (condition["status"], condition["reason"]) == ("False", "EventHubMisconfigured")
    assert condition["message"].startswith(
        f"Secret shop/eh, key 'cs', is not an Event Hubs connection string ({problem}"
    )
    assert (
        "write Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
        "SharedAccessKey=<key> there" in condition["message"]
    )
    assert hubs.listings == []  # never dialled
    assert SECRET_KEY not in caplog.text
    assert (memory.hub.backoff.delay, memory.hub.backoff.retry_at) == (WAIT, wall(0) + WAIT)


async def test_a_string_for_another_namespace_than_the_spec_names_is_refused(
    hubs: PolicedHubs,
) -> None:
    """The pods read the namespace the string names, and keep their checkpoints under the name
    the spec gives: a string for another namespace read it silently, found none of the
    checkpoints its SDK wrote there, and met another consumer of it only at Event Hubs."""
    kube = make_kube(eventhub=VALID_EVENTHUB.replace("sb://shop.", "sb://shop-dr."))
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    condition = shown(kube, "EventHubReachable")
    assert (condition["status"], condition["reason"]) == ("False", "EventHubMisconfigured")
    assert condition["message"].startswith(
        "Secret shop/eh, key 'cs', names the Event Hubs namespace shop-dr.servicebus.windows.net,"
        " but spec.eventHub.fullyQualifiedNamespace is shop.servicebus.windows.net: "
    )
    assert hubs.listings == []  # never dialled


async def test_a_string_for_the_spec_namespace_in_other_letters_is_taken(
    hubs: PolicedHubs,
) -> None:
    kube = make_kube(eventhub=VALID_EVENTHUB.replace("sb://shop.", "sb://SHOP."))
    await cycle(kube, hubs, memories.Memory(), now=0)
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"


async def test_a_malformed_store_string_says_which_secret_and_what_to_write(
    hubs: PolicedHubs,
) -> None:
    kube = make_kube(blob=f"AccountKey={SECRET_KEY}")
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    condition = shown(kube, "CheckpointStoreReachable")
    assert (condition["status"], condition["reason"]) == ("False", "CheckpointStoreMisconfigured")
    assert condition["message"].startswith(
        "Secret shop/blob, key 'cs', is not a storage connection string (it has neither a "
        "BlobEndpoint nor an AccountName): write DefaultEndpointsProtocol=https;"
        "AccountName=<account>;AccountKey=<key>;"
    )
    assert hubs.store.reads == []
    assert (memory.store.backoff.delay, memory.store.backoff.retry_at) == (WAIT, wall(0) + WAIT)
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"


async def test_a_host_the_install_refuses_names_the_secret_and_waits_as_long(
    hubs: PolicedHubs,
) -> None:
    kube = make_kube(
        eventhub=f"Endpoint=sb://hub.example.com/;SharedAccessKeyName=l;SharedAccessKey={SECRET_KEY}",
        namespace="hub.example.com",
    )
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    condition = shown(kube, "EventHubReachable")
    assert (condition["status"], condition["reason"]) == ("False", "EndpointNotAllowed")
    assert condition["message"].startswith(
        "Secret shop/eh, key 'cs': the Event Hubs connection string's Endpoint: host "
        "'hub.example.com' is not allowed (allowed DNS suffixes: .servicebus.windows.net); use "
        "an endpoint under one of them"
    )
    assert memory.hub.backoff.delay == WAIT


@pytest.mark.parametrize(
    ("eventhub", "blob", "type_"),
    [
        (
            f"Endpoint=sb://RootManageSharedAccessKey:{SECRET_KEY}@shop.servicebus.windows.net/;"
            f"SharedAccessKeyName=l;SharedAccessKey={SECRET_KEY}",
            VALID_BLOB,
            "EventHubReachable",
        ),
        (
            VALID_EVENTHUB,
            f"BlobEndpoint=https://shop:{SECRET_KEY}@shop.blob.core.windows.net/;"
            f"SharedAccessSignature=sv=2021&sig={SECRET_KEY}",
            "CheckpointStoreReachable",
        ),
    ],
)
async def test_a_key_written_as_the_endpoints_user_info_is_never_shown(
    hubs: PolicedHubs, eventhub: str, blob: str, type_: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A key pasted into the endpoint URL as its user info (``sb://policy:key@host``) makes
    the host refused; the refusal says so, without the key, in any case (it was lower-cased)."""
    kube = make_kube(eventhub=eventhub, blob=blob)
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    condition = shown(kube, type_)
    assert (condition["status"], condition["reason"]) == ("False", "EndpointNotAllowed")
    secret = SECRET_KEY.lower()
    assert secret not in condition["message"].lower()
    assert all(secret not in str(e).lower() for e in kube.events)
    assert secret not in caplog.text.lower()
    assert "host '<user info>@shop." in condition["message"]


async def test_a_fixed_secret_is_used_at_the_long_bound_and_not_asked_before(
    hubs: PolicedHubs,
) -> None:
    kube = make_kube(eventhub="garbage")
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    for now in range(5, int(WAIT), 5):  # every interval of the wait
        await cycle(kube, hubs, memory, now=now)
        assert memory.hub.backoff.retry_at == wall(0) + WAIT
        if now == 100:
            kube.add_secret(NS, "eh", {"cs": VALID_EVENTHUB})  # Secrets are not watched
    assert hubs.listings == []
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "False"
    await cycle(kube, hubs, memory, now=WAIT)
    assert hubs.listings == [wall(WAIT)]
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"
    assert memory.hub.backoff == deadlines.Backoff()


async def test_a_spec_that_points_at_another_secret_is_tried_at_once(
    hubs: PolicedHubs,
) -> None:
    kube = make_kube(eventhub="garbage")
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    await cycle(kube, hubs, memory, now=5)
    assert hubs.listings == []
    kube.add_secret(NS, "eh-fixed", {"connectionString": VALID_EVENTHUB})
    spec = copy.deepcopy(SPEC)
    spec["eventHub"]["credentials"] = {
        "connectionStringSecretRef": {"name": "eh-fixed", "key": "connectionString"}
    }
    kube.set_spec(NS, NAME, spec)
    await cycle(kube, hubs, memory, now=10)
    assert hubs.listings == [wall(10)]
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"


async def test_a_transient_fault_keeps_the_fast_pace(hubs: PolicedHubs) -> None:
    """The long wait is for configuration errors only: an outage is asked again soon."""
    kube = make_kube()
    hubs.failure = errors.EventHubUnreachable("connection refused")
    memory = memories.Memory()
    await cycle(kube, hubs, memory, now=0)
    assert memory.hub.backoff.delay == 5.0
    hubs.failure = None
    await cycle(kube, hubs, memory, now=5)
    assert kube.condition(NS, NAME, "EventHubReachable")["status"] == "True"


@pytest.mark.parametrize(
    ("secret", "said"),
    [
        (None, "Secret shop/eh not found: create it with the connection string under key 'cs'"),
        (
            {"other": VALID_EVENTHUB},
            "Secret shop/eh has no key 'cs': add the connection string under that key",
        ),
    ],
)
async def test_a_missing_secret_or_key_names_the_key_to_write(
    hubs: PolicedHubs, secret: dict[str, str] | None, said: str
) -> None:
    # A missing Secret was told to be created "with the connection string under that key",
    # with no key named anywhere in the message.
    kube = make_kube()
    del kube.objects[("secret", NS, "eh")]
    if secret is not None:
        kube.add_secret(NS, "eh", secret)
    await cycle(kube, hubs, memories.Memory(), now=0)
    condition = shown(kube, "EventHubReachable")
    assert (condition["status"], condition["reason"]) == ("False", "SecretNotFound")
    assert condition["message"].startswith(said)
    assert "or fix the connectionStringSecretRef in the spec" in condition["message"]


@pytest.mark.parametrize("ref", ["eh", "blob"])
async def test_a_missing_secret_is_taken_up_within_30_s_of_its_creation(
    hubs: PolicedHubs, ref: str
) -> None:
    # Someone creates it, then waits for the consumer to take it up, as for a missing hub: it
    # was asked with the outage's backoff, and the condition went on saying "not found" for
    # up to 5 minutes after the Secret was there.
    kube = make_kube()
    value = kube.objects.pop(("secret", NS, ref))["data"]
    memory = memories.Memory()
    for now in range(0, 630, 5):  # the cycles' interval
        await cycle(kube, hubs, memory, now=now)
    kind = "EventHubReachable" if ref == "eh" else "CheckpointStoreReachable"
    assert shown(kube, kind)["reason"] == "SecretNotFound"
    kube.add_secret(NS, ref, value)
    for now in range(630, 630 + 30 + 10, 5):  # the longest wait, and a cycle
        await cycle(kube, hubs, memory, now=now)
    assert shown(kube, kind)["status"] == "True"


@pytest.mark.parametrize("ref", ["eh", "blob"])
async def test_a_forbidden_secret_is_taken_up_within_30_s_of_its_rolebinding(
    hubs: PolicedHubs, monkeypatch: pytest.MonkeyPatch, ref: str
) -> None:
    """Live: a namespace created again without the RoleBinding that lends it the tenant
    ClusterRole. Once it was bound again, the condition went on saying "forbidden (403)" for
    as long as the outage's backoff (up to 5 minutes): someone binds it and waits, as for a
    Secret that did not exist."""
    kube = make_kube()
    read = kube.read_secret_key
    bound = False

    async def read_secret_key(*, namespace: str, name: str, key: str) -> str:
        if not bound and name == ref:
            raise errors.SecretForbidden(f"Secret {namespace}/{name}: reading it is forbidden")
        return await read(namespace=namespace, name=name, key=key)

    monkeypatch.setattr(kube, "read_secret_key", read_secret_key)
    memory = memories.Memory()
    for now in range(0, 630, 5):  # the cycles' interval
        await cycle(kube, hubs, memory, now=now)
    kind = "EventHubReachable" if ref == "eh" else "CheckpointStoreReachable"
    assert shown(kube, kind)["reason"] == "Forbidden"
    bound = True
    for now in range(630, 630 + 30 + 10, 5):  # the longest wait, and a cycle
        await cycle(kube, hubs, memory, now=now)
    assert shown(kube, kind)["status"] == "True"
