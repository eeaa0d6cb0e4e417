"""The TokenRequest API of ServiceAccounts: tokens minted by `identities`, for `serving`."""

from __future__ import annotations

import datetime
from typing import Any

from eventhub_balancer_devstack.kube import failures, identities, resources, storage, validating


def token_request(
    store: storage.Store,
    spec: resources.ResourceSpec,
    namespace: str | None,
    name: str,
    body: Any,
) -> dict[str, Any]:
    """A TokenRequest for a ServiceAccount: 404 without it, 422 under 10 minutes."""
    account = store.get(spec, namespace=namespace, name=name)
    asked = (body or {}).get("spec") if isinstance(body, dict) else None
    asked = asked if isinstance(asked, dict) else {}
    seconds = asked.get("expirationSeconds") or identities.TOKEN_DEFAULT_SECONDS
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise failures.bad_request("spec.expirationSeconds: must be an integer")
    if seconds < identities.TOKEN_MIN_SECONDS:
        cause: validating.Cause = {
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: {seconds}: may not specify a duration less than 10 minutes",
            "field": "spec.expirationSeconds",
        }
        # The real server names no object here: the request itself is what is invalid.
        raise failures.invalid_fields(
            kind="TokenRequest",
            group="authentication.k8s.io",
            name="",
            causes=[cause],
            message=validating.summary([cause]),
        )
    audiences = [str(a) for a in asked.get("audiences") or [identities.DEFAULT_AUDIENCE]]
    issued = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    token = identities.service_account_token(
        namespace=namespace or "",
        name=name,
        uid=str(account["metadata"].get("uid") or ""),
        audiences=audiences,
        issued_at=int(issued.timestamp()),
        expiration_seconds=seconds,
    )
    expires = issued + datetime.timedelta(seconds=seconds)
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": account["metadata"].get("uid"),
            "creationTimestamp": account["metadata"].get("creationTimestamp"),
        },
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": None},
        "status": {
            "token": token,
            "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
