"""Where the operator's and the pods' credentials may go: the allowed DNS suffixes, pure.

With workload identity the operator (and each pod) requests a token for the host a spec
names; a CR's author chooses that host. So every host is checked against the suffixes the
installer allows before a client is built: Event Hubs namespaces under
``.servicebus.windows.net``, Blob endpoints under ``.blob.core.windows.net`` by default;
sovereign clouds are added by configuration. A connection string's own endpoint is checked the
same way (the operator's network position is worth protecting too). The local development
emulators (``UseDevelopmentEmulator=true``, Azurite's ``UseDevelopmentStorage=true`` or a
loopback ``BlobEndpoint``) pass only when the install allows development endpoints, and only
on a loopback host.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import urllib.parse

from eventhub_balancer import errors

#: The public Azure cloud's suffixes; sovereign clouds add theirs by configuration.
PUBLIC_EVENTHUB_SUFFIXES = (".servicebus.windows.net",)
PUBLIC_BLOB_SUFFIXES = (".blob.core.windows.net",)
#: Where the development emulators listen: never a remote host.
LOOPBACK_NAMES = ("localhost",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EndpointPolicy:
    """The hosts credentials may be sent to; ``setting`` names where the installer sets them."""

    eventhub_suffixes: tuple[str, ...] = PUBLIC_EVENTHUB_SUFFIXES
    blob_suffixes: tuple[str, ...] = PUBLIC_BLOB_SUFFIXES
    allow_development: bool = False
    setting: str = "--allowed-eventhub-suffix / --allowed-blob-suffix"

    def check_eventhub(
        self, *, fully_qualified_namespace: str, connection_string: str | None
    ) -> None:
        """Raise `errors.EndpointNotAllowed` unless the Event Hubs host is allowed."""
        if connection_string is not None:
            fields = _fields(connection_string)
            host = _host(fields.get("endpoint", ""))
            field = "the Event Hubs connection string's Endpoint"
            if fields.get("usedevelopmentemulator", "").lower() == "true":
                self._development(field, host)
                return
        else:
            host = _host(fully_qualified_namespace)
            field = "spec.eventHub.fullyQualifiedNamespace"
        self._suffix(field, host, self.eventhub_suffixes)

    def check_blob(self, *, account_url: str | None, connection_string: str | None) -> None:
        """Raise `errors.EndpointNotAllowed` unless the Blob endpoint is allowed."""
        if connection_string is not None:
            fields = _fields(connection_string)
            field = "the checkpoint store's connection string"
            if fields.get("usedevelopmentstorage", "").lower() == "true":
                self._development(field, "127.0.0.1")
                return
            endpoint = fields.get("blobendpoint")
            if endpoint:
                host = _host(endpoint)
                if _is_loopback(host):
                    self._development(field, host)
                    return
            else:
                suffix = fields.get("endpointsuffix", "core.windows.net")
                host = f"{fields.get('accountname', '')}.blob.{suffix}"
            self._suffix(field, host, self.blob_suffixes)
            return
        parsed = urllib.parse.urlsplit(account_url or "")
        field = "spec.checkpointStore.accountUrl"
        if parsed.scheme != "https":
            raise errors.EndpointNotAllowed(
                field=field,
                host=account_url or "",
                allowed=self.blob_suffixes,
                setting=self.setting,
            )
        self._suffix(field, _host(account_url or ""), self.blob_suffixes)

    def _suffix(self, field: str, host: str, suffixes: tuple[str, ...]) -> None:
        label = host.removesuffix(next((s for s in suffixes if host.endswith(s.lower())), ""))
        # One DNS label before the suffix: "a.b.servicebus.windows.net" is someone's subdomain.
        if host and label != host and label and "." not in label:
            return
        raise errors.EndpointNotAllowed(
            field=field, host=host, allowed=suffixes, setting=self.setting
        )

    def _development(self, field: str, host: str) -> None:
        if self.allow_development and _is_loopback(host):
            return
        raise errors.EndpointNotAllowed(
            field=field,
            host=host,
            allowed=("development emulators on loopback",) if self.allow_development else (),
            setting="--allow-development-endpoints, for the local stack only",
        )


def _fields(connection_string: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip():
            result[key.strip().lower()] = value.strip()
    return result


def _host(endpoint: str) -> str:
    """The host of an endpoint given as a URL (``sb://h/``, ``https://h``) or a bare name."""
    text = endpoint.strip()
    if "://" not in text:
        text = "//" + text
    try:
        host = urllib.parse.urlsplit(text).hostname or ""
    except ValueError:
        return ""
    return host.lower().rstrip(".")


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normalise_suffixes(values: list[str] | tuple[str, ...], *, field: str) -> tuple[str, ...]:
    """Suffixes as the installer gives them (with or without the leading dot), checked."""
    result: list[str] = []
    for value in values:
        suffix = "." + value.strip().lower().lstrip(".")
        if suffix.count(".") < 2 or any(c in suffix for c in "/:@ *"):
            raise errors.InvalidInput(
                field, f"{value!r} is not a DNS suffix: give one such as .servicebus.windows.net"
            )
        result.append(suffix)
    return tuple(result)
