"""The checkpoint store's address as a cycle gathers it from the spec and the Secret."""

from __future__ import annotations

from eventhub_balancer.contracts import checkpointblobs, specs, storeaddresses
from tests.contracts.test_contracts import SPEC
from tests.support import fakes

BLOBS = "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=c2VjcmV0;"


def test_a_connection_string_spec_names_no_account_url_and_no_service_account() -> None:
    address = storeaddresses.StoreAddress.of_spec(
        specs.parse_spec(SPEC),
        connection_string=BLOBS,
        consumer_namespace="shop",
        consumer="shop/orders",
    )
    assert address == storeaddresses.StoreAddress(
        fully_qualified_namespace="shop.servicebus.windows.net",
        eventhub_name="orders",
        consumer_group="$Default",
        container_name="checkpoints",
        connection_string=BLOBS,
        account_url=None,
        consumer_namespace="shop",
        service_account=None,
        consumer="shop/orders",
    )


def test_an_identity_spec_reads_at_its_account_url_as_its_service_account() -> None:
    spec = specs.parse_spec(
        {
            **SPEC,
            "serviceAccountName": "orders-reader",
            "checkpointStore": {
                "containerName": "checkpoints",
                "accountUrl": "https://shop.blob.core.windows.net",
                "credentials": {"workloadIdentity": {}},
            },
        }
    )
    address = storeaddresses.StoreAddress.of_spec(
        spec, connection_string=None, consumer_namespace="shop", consumer="shop/orders"
    )
    assert address.account_url == "https://shop.blob.core.windows.net"
    assert address.service_account == "orders-reader"
    assert address.connection_string is None


def test_the_address_never_shows_the_secret() -> None:
    address = storeaddresses.StoreAddress.of_spec(
        specs.parse_spec(SPEC), connection_string=BLOBS, consumer_namespace="shop", consumer="c"
    )
    assert "c2VjcmV0" not in repr(address)
    assert "c2VjcmV0" not in str(address)


def test_the_blob_prefix_is_the_one_the_sdk_lists_under() -> None:
    address = fakes.store_address(
        fully_qualified_namespace="Shop.servicebus.windows.net", eventhub_name="Orders"
    )
    assert address.blob_prefix(checkpointblobs.OWNERSHIP) == checkpointblobs.blob_prefix(
        fully_qualified_namespace="Shop.servicebus.windows.net",
        eventhub_name="Orders",
        consumer_group="$Default",
        kind=checkpointblobs.OWNERSHIP,
    )
    assert address.blob_prefix() == "shop.servicebus.windows.net/orders/$default/checkpoint/"
