"""`connectionstrings`: a connection string that can never work is told apart from one that
can, and the answer never quotes the string."""

from __future__ import annotations

import pytest

from eventhub_balancer import errors
from eventhub_balancer.contracts import connectionstrings, endpoints

SECRET = "c2VjcmV0LWtleQ"

WORKING_EVENTHUB = [
    f"Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=l;SharedAccessKey={SECRET}",
    "Endpoint=sb://shop.servicebus.windows.net/;"
    f"SharedAccessSignature=SharedAccessSignature sr={SECRET};",
    "Endpoint=sb://localhost;SharedAccessKeyName=Root;SharedAccessKey=k;UseDevelopmentEmulator=true",
    "Endpoint=sb://shop/;SharedAccessKey=x",
]
BROKEN_EVENTHUB = [
    ("garbage", "part 1 of 1 is not Key=Value"),
    ("", "part 1 of 1 is not Key=Value"),
    (f"Endpoint=sb://shop.servicebus.windows.net/;;SharedAccessKey={SECRET}", "part 2 of 3"),
    (f"{SECRET}+/x=1;Endpoint=sb://shop.servicebus.windows.net/", "the key of part 1"),
    (f"Endpoint= sb://shop.servicebus.windows.net/;SharedAccessKey={SECRET}", "spaces"),
    ("Endpoint=sb://a.servicebus.windows.net/;endpoint=sb://b.servicebus.windows.net/", "repeats"),
    (f"SharedAccessKeyName=l;SharedAccessKey={SECRET}", "it has no Endpoint"),
    ("Endpoint=https://shop.servicebus.windows.net/", "its Endpoint is not an sb:// URL"),
    ("Endpoint=sb://;SharedAccessKey=x", "its Endpoint names no host"),
    ("Endpoint=sb://localhost;UseDevelopmentEmulator=True", "must be exactly true or false"),
]
WORKING_BLOB = [
    f"DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={SECRET};EndpointSuffix=core.windows.net",
    f"AccountName=shop;AccountKey={SECRET}",
    f"BlobEndpoint=https://shop.blob.core.windows.net/;SharedAccessSignature=sv={SECRET}",
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=k;"
    "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;",
    "UseDevelopmentStorage=true",
]
BROKEN_BLOB = [
    ("garbage", "part 1 of 1 is not Key=Value"),
    (f"AccountKey={SECRET}", "it has neither a BlobEndpoint nor an AccountName"),
    ("BlobSecondaryEndpoint=https://shop-secondary.blob.core.windows.net/", "neither"),
    ("BlobEndpoint=shop.blob.core.windows.net;AccountKey=k", "not an https:// URL with a host"),
    ("BlobEndpoint=ftp://shop.blob.core.windows.net;AccountKey=k", "not an https:// URL"),
    ("UseDevelopmentStorage=yes", "must be exactly true or false"),
]


@pytest.mark.parametrize("value", WORKING_EVENTHUB)
def test_a_working_eventhub_string_has_no_problem(value: str) -> None:
    assert connectionstrings.eventhub_problem(value) is None


@pytest.mark.parametrize(("value", "problem"), BROKEN_EVENTHUB)
def test_a_broken_eventhub_string_says_what_and_what_to_write(value: str, problem: str) -> None:
    said = connectionstrings.eventhub_problem(value)
    assert said is not None
    assert said.startswith("is not an Event Hubs connection string (")
    assert problem in said
    assert said.endswith(f"write {connectionstrings.EVENTHUB_SHAPE} there")
    assert SECRET not in said


@pytest.mark.parametrize("value", WORKING_BLOB)
def test_a_working_storage_string_has_no_problem(value: str) -> None:
    assert connectionstrings.blob_problem(value) is None


@pytest.mark.parametrize(("value", "problem"), BROKEN_BLOB)
def test_a_broken_storage_string_says_what_and_what_to_write(value: str, problem: str) -> None:
    said = connectionstrings.blob_problem(value)
    assert said is not None
    assert said.startswith("is not a storage connection string (")
    assert problem in said
    assert SECRET not in said


@pytest.mark.parametrize(("value", "_problem"), BROKEN_EVENTHUB[:6])
def test_what_the_shape_check_refuses_as_unreadable_the_endpoint_check_refuses_too(
    value: str, _problem: str
) -> None:
    """Both read the parts alike: the shape check only says it first, and better."""
    with pytest.raises(errors.AmbiguousConnectionString):
        endpoints.connection_string_fields(value, field="f")


@pytest.mark.parametrize(
    ("value", "namespace", "refused"),
    [
        (
            "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKey=x",
            "shop.servicebus.windows.net",
            False,
        ),
        (
            "Endpoint=sb://SHOP.servicebus.windows.net:5671/;SharedAccessKey=x",
            "shop.servicebus.windows.net",
            False,
        ),
        (
            "Endpoint=sb://shop-dr.servicebus.windows.net/;SharedAccessKey=x",
            "shop.servicebus.windows.net",
            True,
        ),
        (
            "Endpoint=sb://127.0.0.1:5672;SharedAccessKey=x;UseDevelopmentEmulator=true",
            "shop.servicebus.windows.net",
            False,
        ),
        ("Endpoint=sb://shop-dr.servicebus.windows.net/;SharedAccessKey=x", "", False),
    ],
)
def test_a_string_for_another_namespace_than_the_spec_names_is_refused(
    value: str, namespace: str, refused: bool
) -> None:
    """Letter case and a port do not count, and the local emulator's string names localhost
    whatever the spec says; without the spec's namespace only the shape is checked."""
    problem = connectionstrings.eventhub_problem(value, namespace)
    assert (problem is not None) == refused
    if refused:
        assert problem == (
            "names the Event Hubs namespace shop-dr.servicebus.windows.net, but "
            "spec.eventHub.fullyQualifiedNamespace is shop.servicebus.windows.net: make them the "
            "same (the pods read the namespace the string names, and keep their checkpoints under "
            "the name the spec gives)"
        )
