"""``ehb checkpoints list`` without NAME: the events waiting after each checkpoint, read from
the hub the runner names (``--eventhub-connection-string`` or its variable, else with
``--account-url`` the runner's own identity), which must be the hub whose checkpoints are
listed. Against the emulator and Azurite: tests/adapters/wire/test_checkpoint_reset.py."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventhub_balancer import cli, errors
from eventhub_balancer.adapters import checkpointresets
from eventhub_balancer.cli import checkpointwaits
from tests.cli.test_checkpoint_waits import Hub, checkpoint, properties

FQNS = "shop.servicebus.windows.net"
KEYS = "SharedAccessKeyName=listen;SharedAccessKey=k"
SHOP = f"Endpoint=sb://{FQNS}/;{KEYS}"
ENV = "EHB_EVENTHUB_CONNECTION_STRING"


def parse(*flags: str) -> argparse.Namespace:
    where = ["--container", "checkpoints", "--eventhub-namespace", FQNS, "--hub", "orders"]
    return cli.build_parser().parse_args(["checkpoints", "list", *where, *flags])


@pytest.fixture(autouse=True)
def no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def test_without_a_way_to_the_hub_there_is_no_column() -> None:
    assert checkpointwaits.by_flags(parse("--connection-string", "x")) is None


def test_the_flag_then_the_variable_give_the_connection_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert checkpointwaits.by_flags(parse("--eventhub-connection-string", SHOP)) == (
        checkpointwaits.HubByFlags(SHOP)
    )
    monkeypatch.setenv(ENV, f"{SHOP};EntityPath=orders")
    assert checkpointwaits.by_flags(parse()) == checkpointwaits.HubByFlags(
        f"{SHOP};EntityPath=orders"
    )
    monkeypatch.setenv(ENV, "")  # an empty variable is unset
    assert checkpointwaits.by_flags(parse()) is None


def test_an_account_url_reads_the_hub_with_the_runners_own_identity() -> None:
    args = parse("--account-url", "https://shop.blob.core.windows.net")
    assert checkpointwaits.by_flags(args) == checkpointwaits.HubByFlags(None)
    # The runner's token goes only to a namespace the operator's allow-list allows.
    args.eventhub_namespace = "shop.servicebus.evil.example"
    with pytest.raises(errors.EndpointNotAllowed) as caught:
        checkpointwaits.by_flags(args)
    assert str(caught.value).startswith(
        "--eventhub-namespace: host 'shop.servicebus.evil.example' is not allowed"
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        # Counts read from another namespace or hub would pass for this one's.
        (
            f"Endpoint=sb://other.servicebus.windows.net/;{KEYS}",
            "--eventhub-connection-string: names the Event Hubs namespace "
            "other.servicebus.windows.net, not --eventhub-namespace shop.servicebus.windows.net: "
            "give the connection string of the namespace whose checkpoints are listed",
        ),
        (
            f"{SHOP};EntityPath=payments",
            "--eventhub-connection-string: is for the Event Hub 'payments', not --hub 'orders': "
            "give one for 'orders', or the namespace's (without EntityPath)",
        ),
        ("", "--eventhub-connection-string: is not an Event Hubs connection string (part 1 of 1"),
        (
            "Endpoint=sb://shop.example.com/;" + KEYS,
            "--eventhub-connection-string: names the Event Hubs namespace shop.example.com",
        ),
    ],
)
def test_a_connection_string_for_another_hub_is_refused(value: str, problem: str) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        checkpointwaits.by_flags(parse("--eventhub-connection-string", value))
    assert str(caught.value).startswith(problem)
    assert "SharedAccessKey=k" not in str(caught.value)


def test_the_host_must_be_allowed_as_the_operator_allows_it() -> None:
    value = f"Endpoint=sb://shop.contoso.example/;{KEYS}"
    args = parse("--eventhub-connection-string", value)
    args.eventhub_namespace = "shop.contoso.example"
    with pytest.raises(errors.EndpointNotAllowed, match=r"shop\.contoso\.example"):
        checkpointwaits.by_flags(args)
    args = parse(
        "--eventhub-connection-string", value, "--allowed-eventhub-suffix", ".contoso.example"
    )
    args.eventhub_namespace = "shop.contoso.example"
    assert checkpointwaits.by_flags(args) == checkpointwaits.HubByFlags(value)


def test_the_emulators_string_names_localhost_whatever_the_blobs_say() -> None:
    emulator = f"Endpoint=sb://127.0.0.1:5672;{KEYS};UseDevelopmentEmulator=true"
    hub = checkpointwaits.by_flags(parse("--eventhub-connection-string", emulator))
    assert hub == checkpointwaits.HubByFlags(emulator)


def test_with_name_the_crs_identity_reads_the_hub_and_the_flag_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["checkpoints", "list", "orders", "--eventhub-connection-string", SHOP])
    assert code == 2
    assert capsys.readouterr().err == (
        "ehb: error: --eventhub-connection-string: EventHubConsumer orders says how its Event "
        "Hub is read (the identity it declares): drop --eventhub-connection-string, or drop "
        "NAME to list a consumer group by flags\n"
    )


async def test_a_hub_that_cannot_be_read_names_the_flags_not_the_cr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[Any] = []

    @contextlib.asynccontextmanager
    async def hub_client(address: Any) -> AsyncIterator[Hub]:
        opened.append(address)
        yield Hub({"0": properties(0, 9), "1": ConnectionError("link detached")})

    monkeypatch.setattr(checkpointresets, "hub_client", hub_client)
    args = parse("--eventhub-connection-string", SHOP, "--consumer-group", "analytics")
    hub = checkpointwaits.by_flags(args)
    assert hub is not None
    listed = [checkpoint("0", 4), checkpoint("1", 4)]
    waiting = await checkpointwaits.read_by_flags(args, hub, listed, consumer_group="analytics")
    (address,) = opened
    assert (address.fully_qualified_namespace, address.eventhub_name) == (FQNS, "orders")
    assert (address.consumer_group, address.connection_string) == ("analytics", SHOP)
    assert waiting.counts == {"0": 5}
    assert waiting.problem == (
        f"Event Hub 'orders' in {FQNS}: cannot read the properties of partition 1 "
        "(ConnectionError); check --eventhub-namespace, --hub and the Event Hubs credentials"
    )


def test_a_checkpoint_past_its_end_says_what_a_reader_misses_not_what_our_pods_do() -> None:
    """The group's readers are not ours: no spec.startPosition, no reset by NAME to point at."""
    waiting = checkpointwaits.Waiting({}, past_end={"2": 4})
    (line,) = checkpointwaits.warnings(waiting, [checkpoint("2", 900)], managed=False)
    assert line == (
        "ehb: warning: partition 2: checkpoint at sequence number 900 is past the partition's "
        "last event (4): the Event Hub was created again under its name, or the blob was "
        "edited; a reader that starts from it misses the partition's events up to it"
    )


async def test_the_runners_own_identity_is_made_for_the_read_and_closed_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import azure.identity.aio

    made: list[Credential] = []

    class Credential:
        closed = False

        def __init__(self) -> None:
            made.append(self)

        async def close(self) -> None:
            self.closed = True

    opened: list[Any] = []

    @contextlib.asynccontextmanager
    async def hub_client(address: Any) -> AsyncIterator[Hub]:
        opened.append(address)
        yield Hub({"0": properties(0, 9)})

    monkeypatch.setattr(azure.identity.aio, "DefaultAzureCredential", Credential)
    monkeypatch.setattr(checkpointresets, "hub_client", hub_client)
    args = parse("--account-url", "https://shop.blob.core.windows.net")
    hub = checkpointwaits.by_flags(args)
    assert hub == checkpointwaits.HubByFlags(None)
    waiting = await checkpointwaits.read_by_flags(
        args, hub, [checkpoint("0", 4)], consumer_group="$Default"
    )
    assert waiting.counts == {"0": 5}
    (address,) = opened
    (credential,) = made
    assert (address.connection_string, address.credential) == (None, credential)
    assert credential.closed
