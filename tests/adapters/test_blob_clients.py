"""Building the checkpoint container client: connection strings, and no secret in messages."""

from typing import Any

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import blobs

KEY = "c2VjcmV0LWtleS1ub3QtdG8tYmUtcHJpbnRlZA=="
AZURE = (
    f"DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={KEY};"
    "EndpointSuffix=core.windows.net"
)
LOCAL = (
    f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};"
    "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
)


def test_description_of_an_azure_account_has_no_key() -> None:
    description = blobs.describe_connection_string(AZURE)
    assert description == "https://shop.blob.core.windows.net"
    assert KEY not in description


def test_description_of_a_blob_endpoint_drops_a_sas_query() -> None:
    sas = "BlobEndpoint=https://shop.blob.core.windows.net/;SharedAccessSignature=sv=2024&sig=abc"
    assert blobs.describe_connection_string(sas) == "https://shop.blob.core.windows.net/"
    assert blobs.describe_connection_string(LOCAL) == "http://127.0.0.1:10000/devstoreaccount1"


def test_a_connection_string_client_has_the_sdk_retries_off() -> None:
    client = blobs.container_from_connection_string(LOCAL, "checkpoints")
    assert client.container_name == "checkpoints"
    assert client._config.retry_policy.total_retries == 0


def test_a_malformed_connection_string_is_refused_without_echoing_it() -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        blobs.container_from_connection_string(f"AccountKey{KEY}", "checkpoints")
    assert KEY not in str(caught.value)
    assert KEY[:12] not in str(caught.value)


async def test_exactly_one_credential_is_required() -> None:
    with pytest.raises(errors.InvalidInput, match="exactly one"):
        async with blobs.open_container(container_name="checkpoints"):
            pass
    with pytest.raises(errors.InvalidInput, match="exactly one"):
        async with blobs.open_container(
            container_name="checkpoints", connection_string=LOCAL, account_url="https://x"
        ):
            pass


def test_the_client_reads_no_environment_per_request() -> None:
    config: Any = blobs.container_from_connection_string(LOCAL, "checkpoints")._config
    assert config.transport._use_env_settings is False


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


def test_proxies_come_from_the_environment_once(proxy_env: pytest.MonkeyPatch) -> None:
    proxy_env.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    assert blobs.proxies_for("https://shop.blob.core.windows.net") == {
        "https": "http://proxy.corp:3128"
    }
    config: Any = blobs.container_from_connection_string(AZURE, "checkpoints")._config
    assert config.proxy_policy.proxies == {"https": "http://proxy.corp:3128"}


def test_no_proxy_bypasses_the_proxy(proxy_env: pytest.MonkeyPatch) -> None:
    proxy_env.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    proxy_env.setenv("NO_PROXY", ".blob.core.windows.net")
    assert blobs.proxies_for("https://shop.blob.core.windows.net") == {}


def test_without_proxy_variables_there_is_no_proxy(proxy_env: pytest.MonkeyPatch) -> None:
    assert blobs.proxies_for("http://127.0.0.1:10000/devstoreaccount1") == {}
    config: Any = blobs.container_from_connection_string(LOCAL, "checkpoints")._config
    assert not config.proxy_policy.proxies
