"""The spec's strings that name something outside the resource, checked as its users need them.

A host with a port (``spec.eventHub.fullyQualifiedNamespace``, ``checkpointStore.accountUrl``),
an Event Hub and its consumer group, a blob container, a Secret's name and key, a
ServiceAccount's name: each is refused here when
no client could ever use it, with an `errors.InvalidInput` that names the field and says what
to give. The CRD refuses the same values at admission (crds/eventhubconsumers.yaml); this is
the check for specs that were not admitted by it (tests, API servers without CEL).

The patterns end in ``\\Z``: Python's ``$`` also matches before a final newline, so
"checkpoints\\n" would pass here and fail at the API server and Blob Storage.
"""

from __future__ import annotations

import re

from eventhub_balancer import errors

#: A DNS-1123 subdomain: the name of a Secret or a ServiceAccount, as the API server requires.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_DNS_SUBDOMAIN_MAX = 253
#: A key of a Secret's data, as the API server requires of it.
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+\Z")
_SECRET_KEY_MAX = 253
_CONTAINER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]\Z")
#: A host: DNS labels, none empty and none starting or ending with a dash (the endpoint check
#: refuses any other before a client dials it, `endpoints`).
_HOST = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
#: The Event Hubs namespace: a host name, or host:port of a local emulator.
_NAMESPACE_HOST = re.compile(rf"^{_HOST}(:(?P<port>[0-9]{{1,5}}))?\Z")
_NAMESPACE_HOST_MAX = 253
#: The blob endpoint: https and a host (and port), nothing else; the host's suffix is checked
#: against the install's allowed list before any token is requested (`endpoints`).
_ACCOUNT_URL = re.compile(rf"^https://{_HOST}(:(?P<port>[0-9]{{1,5}}))?/?\Z")
_ACCOUNT_URL_MAX = 2048
#: An Event Hub's name as Azure allows it: letters, digits, '.', '-' and '_', starting and
#: ending with a letter or digit. Anything else names no hub, and a '/' would also blur the
#: checkpoint blobs' ``<namespace>/<hub>/<consumer group>/`` prefix with another hub's.
_ENTITY_NAME = re.compile(r"^[A-Za-z0-9]([-._A-Za-z0-9]*[A-Za-z0-9])?\Z")
_EVENT_HUB_NAME_MAX = 256
#: A consumer group: the same characters, at most 50, or the group every hub has.
_CONSUMER_GROUP = re.compile(r"^([$](?i:default)|[A-Za-z0-9]([-._A-Za-z0-9]*[A-Za-z0-9])?)\Z")
_CONSUMER_GROUP_MAX = 50
#: What both names may hold, for the messages that refuse one.
_ENTITY_RULE = "letters, digits, '.', '-' and '_', starting and ending with a letter or digit"
#: A TCP port: the resolver takes 65536 and above modulo 65536, so a client would dial another.
PORTS = range(1, 65536)


def _usable(pattern: re.Pattern[str], value: str, limit: int) -> bool:
    """``value`` within ``limit`` characters, of ``pattern``, and its port (if any) a port."""
    match = pattern.match(value)
    if len(value) > limit or match is None:
        return False
    port = match.group("port")
    return port is None or int(port) in PORTS


def fully_qualified_namespace(value: str, field: str) -> str:
    if not _usable(_NAMESPACE_HOST, value, _NAMESPACE_HOST_MAX):
        raise errors.InvalidInput(
            field,
            f"{value[:80]!r} is not an Event Hubs namespace host: use <namespace>.servicebus."
            "windows.net, or host:port with a port from 1 to 65535 for a local emulator",
        )
    return value


def event_hub_name(value: str, field: str) -> str:
    if len(value) > _EVENT_HUB_NAME_MAX or not _ENTITY_NAME.match(value):
        raise errors.InvalidInput(
            field,
            f"{value[:80]!r} is not an Event Hub name: use the hub's name in its namespace "
            f"({_ENTITY_RULE}, at most {_EVENT_HUB_NAME_MAX} characters)",
        )
    return value


def consumer_group(value: str, field: str) -> str:
    if len(value) > _CONSUMER_GROUP_MAX or not _CONSUMER_GROUP.match(value):
        raise errors.InvalidInput(
            field,
            f"{value[:80]!r} is not a consumer group name: use $Default or a group of the hub "
            f"({_ENTITY_RULE}, at most {_CONSUMER_GROUP_MAX} characters)",
        )
    return value


def account_url(value: str, field: str) -> str:
    if not _usable(_ACCOUNT_URL, value, _ACCOUNT_URL_MAX):
        raise errors.InvalidInput(
            field,
            f"{value[:80]!r} is not a blob endpoint: use https://<account>.blob.core."
            "windows.net (a host under a suffix the operator's install allows; a port, if "
            "any, from 1 to 65535)",
        )
    return value


def container_name(value: str, field: str) -> str:
    if not (3 <= len(value) <= 63) or not _CONTAINER_NAME.match(value) or "--" in value:
        raise errors.InvalidInput(
            field,
            f"{value!r} is not a blob container name: use 3-63 lower-case letters, digits "
            "and single dashes, starting and ending with a letter or digit",
        )
    return value


def is_object_name(value: object) -> bool:
    """Whether ``value`` is a name the API server takes for a Secret, a ServiceAccount or a
    custom resource (a DNS-1123 subdomain)."""
    return (
        isinstance(value, str)
        and len(value) <= _DNS_SUBDOMAIN_MAX
        and _DNS_SUBDOMAIN.match(value) is not None
    )


#: What `is_object_name` asks of a name, for a message that refuses one.
OBJECT_NAME_RULE = (
    "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at "
    f"most {_DNS_SUBDOMAIN_MAX} characters"
)


def object_name(value: object, field: str, kind: str, where: str) -> str:
    """The name of a ``kind`` object (Secret, ServiceAccount) ``where`` it must be found."""
    if not is_object_name(value):
        shown = value[:80] if isinstance(value, str) else value
        raise errors.InvalidInput(
            field,
            f"{shown!r} is not a {kind} name: use the name of a {kind} {where} "
            f"({OBJECT_NAME_RULE})",
        )
    assert isinstance(value, str)
    return value


def secret_key(value: str, field: str) -> str:
    if len(value) > _SECRET_KEY_MAX or not _SECRET_KEY.match(value):
        raise errors.InvalidInput(
            field,
            f"{value[:80]!r} is not a key a Secret can hold: use the key under the Secret's "
            "data (letters, digits, '-', '_' and '.', at most 253 characters)",
        )
    return value
