"""The endpoint check reads a connection string as the SDKs do, or refuses it.

Each attack string below is first read by the SDK's own parser (azure-core's for Event Hubs,
azure-storage's for Blob) to show that the SDK would dial the attacker's host; then the
check must refuse it. A property test holds the other direction: whatever the check lets
through, the SDK reads the very host that was checked.
"""

from __future__ import annotations

import re
import urllib.parse

import pytest
from azure.eventhub._client_base import _parse_conn_str
from azure.storage.blob._shared.base_client import parse_connection_str
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhub_balancer import errors
from eventhub_balancer.contracts import endpoints

STRICT = endpoints.EndpointPolicy()
HUB = "x.servicebus.windows.net"
ACCOUNT = "x.blob.core.windows.net"


def sdk_eventhub_host(connection_string: str) -> str:
    """The host azure-eventhub's clients connect to for this string."""
    host: str = _parse_conn_str(connection_string)[0]
    return host


def sdk_blob_host(connection_string: str) -> str:
    """The host azure-storage-blob's clients send requests to for this string."""
    primary, _secondary, _credential = parse_connection_str(connection_string, None, "blob")
    return urllib.parse.urlsplit(primary).netloc


EVENTHUB_ATTACKS = {
    # azure-core refuses an exact duplicate, but " Endpoint" is another key to it, and the
    # check used to strip keys and keep the last value.
    "a second Endpoint behind a space": (
        f"Endpoint=sb://evil.example/;SharedAccessKeyName=k;SharedAccessKey=s; Endpoint=sb://{HUB}/"
    ),
    "a second Endpoint behind a tab, in another case": (
        f"endpoint=sb://evil.example/;SharedAccessKeyName=k;SharedAccessKey=s;\tENDPOINT=sb://{HUB}/"
    ),
    "HostName instead of Endpoint": "HostName=sb://evil.example/;SharedAccessKeyName=k;SharedAccessKey=s",
}

BLOB_ATTACKS = {
    "a dotless i in BlobEndpoint (azure-storage upper-cases it)": (
        f"AccountName=x;AccountKey=k;BlobEndpoint=https://{ACCOUNT};BlobEndpo\u0131nt=https://evil.example"
    ),
    "a protocol that carries a host": (
        "DefaultEndpointsProtocol=https://evil.example/?;AccountName=x;AccountKey=k;"
        "EndpointSuffix=core.windows.net"
    ),
    "an account name that carries a host": "AccountName=evil.example/?;AccountKey=k",
    "a long s in EndpointSuffix": (
        "AccountName=x;AccountKey=k;EndpointSuffix=core.windows.net;Endpoint\u017fuffix=evil.example"
    ),
    "user info before an allowed host": f"AccountName=x;AccountKey=k;BlobEndpoint=https://{ACCOUNT}@evil.example",
}


@pytest.mark.parametrize("attack", sorted(EVENTHUB_ATTACKS))
def test_an_eventhub_string_the_sdk_reads_as_another_host_is_refused(attack: str) -> None:
    text = EVENTHUB_ATTACKS[attack]
    assert "evil.example" in sdk_eventhub_host(text)
    with pytest.raises(errors.EndpointNotAllowed) as caught:
        STRICT.check_eventhub(fully_qualified_namespace=HUB, connection_string=text)
    assert "s" not in str(caught.value).split("SharedAccessKey=")[1:]  # no secret echoed


@pytest.mark.parametrize("attack", sorted(BLOB_ATTACKS))
def test_a_blob_string_the_sdk_reads_as_another_host_is_refused(attack: str) -> None:
    text = BLOB_ATTACKS[attack]
    assert "evil.example" in sdk_blob_host(text)
    with pytest.raises(errors.EndpointNotAllowed):
        STRICT.check_blob(account_url=None, connection_string=text)


def test_ambiguity_is_refused_with_a_message_naming_the_key_never_the_secret() -> None:
    text = f"AccountName=x;AccountKey=TOPSECRET;BlobEndpo\u0131nt=https://{ACCOUNT}"
    with pytest.raises(errors.AmbiguousConnectionString) as caught:
        STRICT.check_blob(account_url=None, connection_string=text)
    message = str(caught.value)
    assert "BlobEndpo\\u0131nt" in message
    assert "plain ASCII letters" in message
    assert "TOPSECRET" not in message
    twice = (
        f"Endpoint=sb://{HUB}/;SharedAccessKeyName=k;SharedAccessKey=TOPSECRET;Endpoint=sb://{HUB}/"
    )
    with pytest.raises(errors.AmbiguousConnectionString) as caught:
        STRICT.check_eventhub(fully_qualified_namespace=HUB, connection_string=twice)
    assert "Endpoint is given more than once" in str(caught.value)
    assert "TOPSECRET" not in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        f"Endpoint=sb://{HUB}/; SharedAccessKeyName=k;SharedAccessKey=s",
        f"Endpoint= sb://{HUB}/;SharedAccessKeyName=k;SharedAccessKey=s",
        f"Endpoint=sb://{HUB}/;;SharedAccessKeyName=k;SharedAccessKey=s",
        f"Endpoint=sb://{HUB}/;SharedAccessKeyName;SharedAccessKey=s",
        f"Endpoint=sb://{HUB}/;SharedAccessKeyName=k;SharedAccessKey=s;UseDevelopmentEmulator=True",
    ],
)
def test_parts_the_parsers_could_split_differently_are_refused(text: str) -> None:
    with pytest.raises(errors.AmbiguousConnectionString):
        endpoints.EndpointPolicy(allow_development=True).check_eventhub(
            fully_qualified_namespace=HUB, connection_string=text
        )


def test_a_development_switch_the_sdk_ignores_does_not_open_the_check() -> None:
    # azure-storage takes only "true": with "True" it dials BlobEndpoint, so the check must not
    # wave it through as Azurite.
    text = "UseDevelopmentStorage=True;AccountName=x;AccountKey=k;BlobEndpoint=https://evil.example"
    assert sdk_blob_host(text) == "evil.example"
    with pytest.raises(errors.EndpointNotAllowed):
        endpoints.EndpointPolicy(allow_development=True).check_blob(
            account_url=None, connection_string=text
        )


def test_ordinary_strings_still_pass() -> None:
    STRICT.check_eventhub(
        fully_qualified_namespace=HUB,
        connection_string=f"Endpoint=sb://{HUB}/;SharedAccessKeyName=k;SharedAccessKey=s2V5=;EntityPath=orders\n",
    )
    STRICT.check_blob(
        account_url=None,
        connection_string="DefaultEndpointsProtocol=https;AccountName=x;AccountKey=a2V5==;"
        "EndpointSuffix=core.windows.net;",
    )
    STRICT.check_blob(account_url=None, connection_string="AccountName=x;AccountKey=k")


# -- what the check lets through, the SDK reads as the same host

KEYS = st.sampled_from(
    [
        "Endpoint",
        "endpoint",
        "HostName",
        "SharedAccessKeyName",
        "SharedAccessKey",
        "EntityPath",
        "AccountName",
        "AccountKey",
        "BlobEndpoint",
        "BlobSecondaryEndpoint",
        "EndpointSuffix",
        "DefaultEndpointsProtocol",
        "BlobEndpo\u0131nt",
        "Endpoint\u017fuffix",
        "UseDevelopmentStorage",
        " Endpoint",
    ]
)
VALUES = st.sampled_from(
    [
        f"sb://{HUB}/",
        "sb://evil.example/",
        f"https://{ACCOUNT}",
        "https://evil.example",
        f"https://{ACCOUNT}@evil.example",
        "https",
        "https://evil.example/?",
        "x",
        "evil.example/?",
        "core.windows.net",
        "evil.example",
        "k=",
        "true",
        " x",
    ]
)
STRINGS = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6).map(
    lambda pairs: ";".join(f"{k}={v}" for k, v in pairs)
)


@settings(max_examples=400, deadline=None)
@given(STRINGS)
def test_an_allowed_eventhub_string_is_dialled_where_it_was_checked(text: str) -> None:
    try:
        STRICT.check_eventhub(fully_qualified_namespace=HUB, connection_string=text)
    except errors.EndpointNotAllowed:
        return
    try:
        host = sdk_eventhub_host(text)
    except ValueError:
        return  # the SDK refuses it too: nothing is dialled
    assert re.match(r"^[a-z0-9-]+\.servicebus\.windows\.net$", host.lower()), host


@settings(max_examples=400, deadline=None)
@given(STRINGS)
def test_an_allowed_blob_string_is_dialled_where_it_was_checked(text: str) -> None:
    try:
        STRICT.check_blob(account_url=None, connection_string=text)
    except errors.EndpointNotAllowed:
        return
    try:
        host = sdk_blob_host(text)
    except ValueError:
        return
    assert re.match(r"^[a-z0-9-]+\.blob\.core\.windows\.net$", host.lower()), host
