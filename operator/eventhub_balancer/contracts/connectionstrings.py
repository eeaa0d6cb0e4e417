"""Whether a connection string from a CR's Secret can work at all: its shape, pure.

The operator reads an EventHubConsumer's connection strings from Secrets its author wrote. A
string without an ``Endpoint`` (or ``BlobEndpoint``), or one that is not ``Key=Value`` pairs,
fails the same way on every attempt; left to the SDK or to the endpoint check it reads as
``host '' is not allowed``, which says neither what is wrong nor what to change. So the
operator asks here first, and shows the answer as a configuration error in the condition.

The answer never quotes the string, not even a key from it: a value pasted where a key goes
is a secret. Parts are named by their position. The parts are split as both SDKs split them
(and as `endpoints.connection_string_fields` does); whether the host is allowed stays with
`endpoints.EndpointPolicy`, which the adapters apply on the same string.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

#: The variables a connection string is read from where a flag would show it in `ps`: the
#: pods' (``ehb consume``) and the admin commands' (``ehb checkpoints``, ``ehb deadletters``).
ENV_EVENTHUB_CONNECTION_STRING: Final = "EHB_EVENTHUB_CONNECTION_STRING"
ENV_BLOB_CONNECTION_STRING: Final = "EHB_BLOB_CONNECTION_STRING"
#: What an Event Hubs connection string looks like (the portal's "Shared access policies").
EVENTHUB_SHAPE: Final = (
    "Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
    "SharedAccessKey=<key>"
)
#: What a storage connection string looks like (the portal's "Access keys"), or with a SAS.
BLOB_SHAPE: Final = (
    "DefaultEndpointsProtocol=https;AccountName=<account>;AccountKey=<key>;"
    "EndpointSuffix=core.windows.net (or BlobEndpoint=https://<account>.blob.core.windows.net/;"
    "SharedAccessSignature=<sas>)"
)
#: A key as the SDKs fold it without surprises (see `endpoints`): plain ASCII letters.
_KEY: Final = re.compile(r"^[A-Za-z]+\Z")
#: The development switches' values that the SDKs and the endpoint check read alike.
_SWITCH_VALUES: Final = ("true", "false")


def _fields(connection_string: str) -> tuple[dict[str, str], str | None]:
    """``({lower-cased key: value}, None)``, or ``({}, problem)`` naming a part by position."""
    result: dict[str, str] = {}
    parts = connection_string.strip().rstrip(";").split(";")
    for number, part in enumerate(parts, start=1):
        key, equals, value = part.partition("=")
        if not equals or not key or not value:
            return {}, f"part {number} of {len(parts)} is not Key=Value"
        if not _KEY.match(key):
            return {}, f"the key of part {number} is not plain ASCII letters"
        if value != value.strip():
            return {}, f"the value of part {number} has spaces around it"
        if key.lower() in result:
            return {}, f"part {number} repeats a key given before it"
        result[key.lower()] = value
    return result, None


def _switch(fields: dict[str, str], key: str, name: str) -> tuple[bool, str | None]:
    value = fields.get(key)
    if value is not None and value not in _SWITCH_VALUES:
        return False, f"{name} must be exactly true or false"
    return value == "true", None


def _host(url: str) -> str:
    try:
        return urllib.parse.urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""


def eventhub_problem(connection_string: str, fully_qualified_namespace: str = "") -> str | None:
    """What keeps ``connection_string`` from ever reaching Event Hubs and what to write
    instead, as a predicate for the place it came from (``Secret x, key y, <problem>``);
    None when its shape is right (whether its host is allowed is checked later).

    Given the spec's ``fully_qualified_namespace``, a string for another namespace is refused
    too: the pods would read the namespace the string names and keep their checkpoints under
    the spec's name, so they would find none of the checkpoints an SDK wrote for it, and
    another consumer of it would meet them only as a rival receiver at Event Hubs. The
    development emulator's string is exempt: it names ``localhost``, whatever the spec says.
    """
    fields, problem = _fields(connection_string)
    development = False
    if problem is None:
        development, problem = _switch(fields, "usedevelopmentemulator", "UseDevelopmentEmulator")
    if problem is None:
        endpoint = fields.get("endpoint")
        if endpoint is None:
            problem = "it has no Endpoint"
        elif not development and not endpoint.lower().startswith("sb://"):
            problem = "its Endpoint is not an sb:// URL"
        elif not _host(endpoint):
            problem = "its Endpoint names no host"
        elif development or not fully_qualified_namespace:
            return None
        elif _host(endpoint) != fully_qualified_namespace.strip().lower():
            return (
                f"names the Event Hubs namespace {_host(endpoint)}, but "
                f"spec.eventHub.fullyQualifiedNamespace is {fully_qualified_namespace}: make "
                "them the same (the pods read the namespace the string names, and keep their "
                "checkpoints under the name the spec gives)"
            )
    if problem is None:
        return None
    return f"is not an Event Hubs connection string ({problem}): write {EVENTHUB_SHAPE} there"


def blob_problem(connection_string: str) -> str | None:
    """What keeps ``connection_string`` from ever reaching Blob Storage and what to write
    instead, as `eventhub_problem` says it; None when its shape is right."""
    fields, problem = _fields(connection_string)
    if problem is None:
        development, problem = _switch(fields, "usedevelopmentstorage", "UseDevelopmentStorage")
        if development:
            return None
    if problem is None:
        endpoint = fields.get("blobendpoint")
        if endpoint is not None:
            scheme = urllib.parse.urlsplit(endpoint).scheme.lower() if _host(endpoint) else ""
            if scheme not in ("https", "http"):
                problem = "its BlobEndpoint is not an https:// URL with a host"
        elif "accountname" not in fields:
            problem = "it has neither a BlobEndpoint nor an AccountName"
    if problem is None:
        return None
    return f"is not a storage connection string ({problem}): write {BLOB_SHAPE} there"
