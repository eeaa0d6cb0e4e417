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

The host checked must be the host the SDK dials, so a connection string is read the way the
SDKs read it (azure-core's parser for Event Hubs, azure-storage's for Blob: the first ``=``
splits a part, keys fold case, the endpoint is composed from the same keys), and anything the
two could read differently is refused as a whole: a key twice (one parser keeps the first, a
check that kept the last would check the wrong host), a key that is not plain ASCII letters
(``str.upper`` turns a dotless i, U+0131, into ``I``, so ``BlobEndpo\u0131nt`` is
``BLOBENDPOINT`` to azure-storage), spaces around a key or value, an empty part. Hosts are
plain ASCII without user info: IDNA would map fullwidth punctuation onto ``/`` or ``.``.

`host` is the one place a host is normalised (scheme, path and port dropped, a trailing dot
dropped, lower case): the allow-list here, the location bindings and the shared-location check
(``reconciling.conflicts``) and the admin's commands all compare hosts through it, so that
``Shop.servicebus.windows.net.:5671`` is the same host to each of them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import urllib.parse
from collections.abc import Mapping

from eventhub_balancer import errors

#: The public Azure cloud's suffixes; sovereign clouds add theirs by configuration.
PUBLIC_EVENTHUB_SUFFIXES = (".servicebus.windows.net",)
PUBLIC_BLOB_SUFFIXES = (".blob.core.windows.net",)
#: Where the development emulators listen: never a remote host.
LOOPBACK_NAMES = ("localhost",)
#: azure-storage's default endpoint suffix (``SERVICE_HOST_BASE``) when a string names none.
STORAGE_DEFAULT_SUFFIX = "core.windows.net"
#: A connection string key: the SDKs fold case with ``str.lower``/``str.upper``, which map some
#: non-ASCII letters onto ASCII ones (dotless i U+0131 -> ``I``, Kelvin sign
#: U+212A -> ``k``).
_KEY = re.compile(r"^[A-Za-z]+\Z")
#: The only values of the development switches that both this check and the SDKs agree on
#: (the SDKs compare with ``== "true"``: ``True`` is not the emulator to them).
_SWITCH_VALUES = ("true", "false")
#: A host name as the check accepts it: ASCII letters, digits, dashes and dots only (IDNA maps
#: fullwidth punctuation onto "/" or ".", and "@" splits user info from the host).
_DNS_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\Z")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EndpointPolicy:
    """The hosts credentials may be sent to; ``setting`` names where the installer sets them."""

    eventhub_suffixes: tuple[str, ...] = PUBLIC_EVENTHUB_SUFFIXES
    blob_suffixes: tuple[str, ...] = PUBLIC_BLOB_SUFFIXES
    allow_development: bool = False
    setting: str = "--allowed-eventhub-suffix / --allowed-blob-suffix"

    def check_eventhub(
        self,
        *,
        fully_qualified_namespace: str,
        connection_string: str | None,
        field: str = "spec.eventHub.fullyQualifiedNamespace",
    ) -> None:
        """Raise `errors.EndpointNotAllowed` unless the Event Hubs host is allowed; ``field``
        names where the namespace came from (a command's flag, else the spec's field)."""
        if connection_string is not None:
            field = "the Event Hubs connection string's Endpoint"
            fields = connection_string_fields(connection_string, field=field)
            # azure-eventhub: ``endpoint or hostname``, then the URL's netloc is the host.
            dialled = _url_host(fields.get("endpoint") or fields.get("hostname") or "")
            if _switch(fields, "usedevelopmentemulator", field=field):
                self._development(field, dialled)
                return
        else:
            dialled = host(fully_qualified_namespace)
        self._suffix(field, dialled, self.eventhub_suffixes)

    def check_blob(
        self,
        *,
        account_url: str | None,
        connection_string: str | None,
        field: str = "spec.checkpointStore.accountUrl",
    ) -> None:
        """Raise `errors.EndpointNotAllowed` unless the Blob endpoint is allowed; ``field``
        names where an account URL came from (a command's flag, else the spec's field)."""
        if connection_string is not None:
            field = "the checkpoint store's connection string"
            fields = connection_string_fields(connection_string, field=field)
            if _switch(fields, "usedevelopmentstorage", field=field):
                self._development(field, "127.0.0.1")
                return
            for url in blob_urls(fields):
                dialled = _url_host(url)
                if _is_loopback(dialled):
                    self._development(field, dialled)
                else:
                    self._suffix(field, dialled, self.blob_suffixes)
            return
        try:
            scheme = urllib.parse.urlsplit(account_url or "").scheme
        except ValueError:  # "https://[x" (an unclosed IPv6 bracket): no URL, refused as such
            scheme = ""
        if scheme != "https":
            raise errors.EndpointNotAllowed(
                field=field,
                host=account_url or "",
                allowed=self.blob_suffixes,
                setting=self.setting,
            )
        self._suffix(field, _url_host(account_url or ""), self.blob_suffixes)

    def _suffix(self, field: str, dialled: str, suffixes: tuple[str, ...]) -> None:
        label = dialled.removesuffix(next((s for s in suffixes if dialled.endswith(s.lower())), ""))
        # One DNS label before the suffix: "a.b.servicebus.windows.net" is someone's subdomain.
        if _DNS_NAME.match(dialled) and label != dialled and label and "." not in label:
            return
        raise errors.EndpointNotAllowed(
            field=field, host=dialled, allowed=suffixes, setting=self.setting
        )

    def _development(self, field: str, dialled: str) -> None:
        if self.allow_development and _is_loopback(dialled):
            return
        raise errors.EndpointNotAllowed(
            field=field,
            host=dialled,
            allowed=("development emulators on loopback",) if self.allow_development else (),
            setting="--allow-development-endpoints, for the local stack only",
            development=not self.allow_development,
        )


def connection_string_fields(connection_string: str, *, field: str) -> dict[str, str]:
    """``{lower-cased key: value}``, read as both SDKs read it, or refused when they could differ.

    Raises `errors.AmbiguousConnectionString` naming the key (never a value: values hold
    secrets). The whole string is stripped and one trailing ``;`` dropped, as azure-core does.
    """
    result: dict[str, str] = {}
    parts = connection_string.strip().rstrip(";").split(";")
    for number, part in enumerate(parts, start=1):
        key, equals, value = part.partition("=")
        if not equals or not key or not value:
            raise errors.AmbiguousConnectionString(
                field=field, problem=f"part {number} is not Key=Value"
            )
        if not _KEY.match(key):
            raise errors.AmbiguousConnectionString(
                field=field, problem=f"key {key[:40]!a} is not plain ASCII letters"
            )
        if value != value.strip():
            raise errors.AmbiguousConnectionString(
                field=field, problem=f"the value of {key} has spaces around it"
            )
        folded = key.lower()
        if folded in result:
            raise errors.AmbiguousConnectionString(
                field=field, problem=f"{key} is given more than once"
            )
        result[folded] = value
    return result


def blob_urls(fields: dict[str, str]) -> tuple[str, ...]:
    """The URLs azure-storage builds from a connection string's fields: the primary endpoint,
    and the secondary one when the string names it (reads may retry there)."""
    if "blobendpoint" in fields:
        primary = fields["blobendpoint"]
    elif "blobsecondaryendpoint" in fields:
        return ("",)  # azure-storage refuses a secondary endpoint alone
    elif {"defaultendpointsprotocol", "accountname", "endpointsuffix"} <= fields.keys():
        primary = (
            f"{fields['defaultendpointsprotocol']}://"
            f"{fields['accountname']}.blob.{fields['endpointsuffix']}"
        )
    elif "accountname" in fields:
        suffix = fields.get("endpointsuffix", STORAGE_DEFAULT_SUFFIX)
        primary = f"https://{fields['accountname']}.blob.{suffix}"
    else:
        return ("",)  # azure-storage refuses it: nothing to dial, nothing allowed
    secondary = fields.get("blobsecondaryendpoint")
    return (primary,) if secondary is None else (primary, secondary)


def _switch(fields: dict[str, str], key: str, *, field: str) -> bool:
    value = fields.get(key)
    if value is None:
        return False
    if value not in _SWITCH_VALUES:
        raise errors.AmbiguousConnectionString(
            field=field, problem=f"{key} must be exactly true or false, as the SDKs compare it"
        )
    return value == "true"


def _url_host(url: str) -> str:
    """The host the SDKs dial for an endpoint URL: its netloc, which needs a scheme ("" when
    there is none: nothing is allowed)."""
    try:
        parsed = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return ""
    if not parsed.scheme or not parsed.netloc:
        return ""
    return host(url)


def host(endpoint: str) -> str:
    """The host of an endpoint given as a URL (``sb://h/``, ``https://h``) or a bare name,
    normalised: lower case, without scheme, path, port or a trailing dot ("" when there is
    none).

    With user info (``a@b``) the netloc is returned with its user info as ``<user info>``,
    and `_DNS_NAME` refuses it: which side of the ``@`` a client dials is not worth guessing,
    and what precedes the ``@`` is a password or a key pasted there, which the refusal shows
    nowhere (a condition, an Event, a log line)."""
    text = endpoint.strip()
    if "://" not in text:
        text = "//" + text
    try:
        parsed = urllib.parse.urlsplit(text)
        host = parsed.hostname or ""
    except ValueError:
        return ""
    if "@" in parsed.netloc:
        return "<user info>@" + parsed.netloc.rpartition("@")[2].lower()
    if "\\" in parsed.netloc:
        return parsed.netloc.lower()
    return host.lower().rstrip(".")


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normalise_suffixes(
    values: list[str] | tuple[str, ...], *, field: str, example: str
) -> tuple[str, ...]:
    """Suffixes as the installer gives them (with or without the leading dot), checked; a wrong
    one is said with ``example``, a suffix of the same service (a Blob flag's error used to
    offer .servicebus.windows.net)."""
    result: list[str] = []
    for value in values:
        suffix = "." + value.strip().lower().lstrip(".")
        if suffix.count(".") < 2 or any(c in suffix for c in "/:@ *"):
            raise errors.InvalidInput(
                field, f"{value!r} is not a DNS suffix: give one such as {example}"
            )
        result.append(suffix)
    return tuple(result)


#: The variables that hold the allowed suffixes, comma-separated, for the commands that read
#: them (`ehb consume` and the admin's commands).
ENV_ALLOWED_EVENTHUB_SUFFIXES = "EHB_ALLOWED_EVENTHUB_SUFFIXES"
ENV_ALLOWED_BLOB_SUFFIXES = "EHB_ALLOWED_BLOB_SUFFIXES"


def configured_suffixes(
    eventhub_flags: list[str] | None, blob_flags: list[str] | None, env: Mapping[str, str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Event Hubs and Blob suffixes a command was given: for each, its flag's values, else
    its variable's, else the public cloud's. A wrong one is named by where it came from (a
    flag's value was named as the variable)."""

    def one(
        flags: list[str] | None, flag: str, variable: str, public: tuple[str, ...]
    ) -> tuple[str, ...]:
        if flags:
            return normalise_suffixes(flags, field=flag, example=public[0])
        listed = [v for v in env.get(variable, "").split(",") if v.strip()]
        if not listed:
            return public
        return normalise_suffixes(listed, field=variable, example=public[0])

    return (
        one(
            eventhub_flags,
            "--allowed-eventhub-suffix",
            ENV_ALLOWED_EVENTHUB_SUFFIXES,
            PUBLIC_EVENTHUB_SUFFIXES,
        ),
        one(blob_flags, "--allowed-blob-suffix", ENV_ALLOWED_BLOB_SUFFIXES, PUBLIC_BLOB_SUFFIXES),
    )
