"""A tenant's identity end to end: the local API's TokenRequest, then the token exchange.

The operator's Kubernetes adapter asks the local API server for a token of the tenant's
ServiceAccount; the credential built from it (`tenantidentities.TenantIdentity.credential`)
sends it as the client assertion to a fake Microsoft Entra ID token endpoint: a TLS listener
on 127.0.0.1 (``AZURE_AUTHORITY_HOST``), whose certificate the credential is told to trust.
What arrives there must be the ServiceAccount's client id, in its tenant, with a token for
that ServiceAccount and the exchange's audience, short-lived.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeapi, tenantidentities
from eventhub_balancer_devstack.kube import LocalKubeAPI
from tests.support import identityendpoints

NAMESPACE = "tenant-b"
ACCOUNT = "payments-reader"
CLIENT_ID = "bbbbbbbb-0000-0000-0000-000000000001"
TENANT_ID = "11111111-2222-3333-4444-555555555555"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class IdentityEndpoint:
    """Microsoft Entra ID's token endpoint as far as a client assertion goes: records every
    form posted to ``/<tenant>/oauth2/v2.0/token`` and answers with an access token."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, str]]] = []
        self.url = ""

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.posted.append((request.match_info["tenant"], {k: str(v) for k, v in form.items()}))
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": 3600,
                "ext_expires_in": 3600,
                "access_token": "tenant-b-access-token",
            }
        )


@pytest.fixture
async def identity_endpoint(tmp_path: Path) -> AsyncIterator[tuple[IdentityEndpoint, Path]]:
    cert, key = identityendpoints.self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    endpoint = IdentityEndpoint()
    app = web.Application()
    app.router.add_post("/{tenant}/oauth2/v2.0/token", endpoint.token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    endpoint.url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield endpoint, cert
    finally:
        await runner.cleanup()


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    padded = payload + "=" * (-len(payload) % 4)
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(padded))
    return decoded


async def test_the_exchange_receives_the_service_accounts_token_and_client_id(
    operator_api: kubeapi.KubeAPI,
    local_kube: LocalKubeAPI,
    identity_endpoint: tuple[IdentityEndpoint, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, ca = identity_endpoint
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", endpoint.url)
    local_kube.create_object(
        "v1/serviceaccounts",
        {
            "metadata": {
                "name": ACCOUNT,
                "labels": {tenantidentities.OPT_IN_LABEL: tenantidentities.OPT_IN_VALUE},
                "annotations": {
                    tenantidentities.CLIENT_ID_ANNOTATION: CLIENT_ID,
                    tenantidentities.TENANT_ID_ANNOTATION: TENANT_ID,
                },
            }
        },
        namespace=NAMESPACE,
    )
    tenants = tenantidentities.TenantIdentities(
        operator_api,
        default_tenant_id="99999999-0000-0000-0000-000000000000",  # the operator's: not used
        credential_options={"connection_verify": str(ca)},
    )
    identity = await tenants.identity(namespace=NAMESPACE, service_account=ACCOUNT)
    credential = identity.credential()
    try:
        access = await credential.get_token("https://eventhubs.azure.net/.default")
    finally:
        await credential.close()

    assert access.token == "tenant-b-access-token"
    ((tenant, form),) = endpoint.posted
    assert tenant == TENANT_ID
    assert form["client_id"] == CLIENT_ID
    assert form["client_assertion_type"] == JWT_BEARER
    assert form["scope"] == "https://eventhubs.azure.net/.default"
    token = form["client_assertion"]
    assert token == identity.assertion()
    sent = claims(token)
    assert sent["aud"] == [tenantidentities.AUDIENCE]
    assert sent["sub"] == f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
    assert sent["kubernetes.io"]["namespace"] == NAMESPACE
    assert sent["exp"] - sent["iat"] == tenantidentities.TOKEN_SECONDS


async def test_a_missing_service_account_is_named_by_the_local_api(
    operator_api: kubeapi.KubeAPI,
) -> None:
    tenants = tenantidentities.TenantIdentities(operator_api, default_tenant_id=TENANT_ID)
    with pytest.raises(errors.ServiceAccountNotFound, match=r"tenant-b/absent does not exist"):
        await tenants.identity(namespace=NAMESPACE, service_account="absent")


async def test_the_local_api_refuses_a_token_shorter_than_ten_minutes(
    operator_api: kubeapi.KubeAPI, local_kube: LocalKubeAPI
) -> None:
    local_kube.create_object("v1/serviceaccounts", {"metadata": {"name": ACCOUNT}}, namespace="x")
    with pytest.raises(errors.ApiRejected, match="less than 10 minutes"):
        await operator_api.request_service_account_token(
            namespace="x", name=ACCOUNT, audience=tenantidentities.AUDIENCE, expiration_seconds=60
        )
    status = await operator_api.request_service_account_token(
        namespace="x", name=ACCOUNT, audience=tenantidentities.AUDIENCE, expiration_seconds=600
    )
    expires = datetime.datetime.fromisoformat(status["expirationTimestamp"])
    left = expires - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(minutes=9) < left <= datetime.timedelta(minutes=10)
    assert claims(status["token"])["aud"] == [tenantidentities.AUDIENCE]
