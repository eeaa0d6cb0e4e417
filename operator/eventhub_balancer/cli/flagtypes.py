"""argparse types: a value no object, host or container can have, or a number no count or
wait can be, is refused by the parser, in its one line naming the flag, before a kubeconfig is
read or a client dials anything. Each name takes the rule the spec's own check holds
(`specvalues`, `namespacepatterns`), so a flag and the field it stands for refuse the same
values.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from eventhub_balancer import errors
from eventhub_balancer.contracts import bounds, namespacepatterns, specs, specvalues


def number(
    kind: type[int] | type[float],
    *,
    least: float | None = None,
    positive: bool = False,
    source: str = "",
) -> Callable[[str], int | float]:
    """A number flag's type, finite and bounded by ``least`` and ``positive``: ``float()``
    takes "nan" and "inf", and a count, a rate or a wait of NaN or forever is never meant
    (``nan <= 0`` is false, so a check made after parsing let it through). ``source`` is said
    after the problem, in brackets (where the value came from)."""
    what = "a whole number" if kind is int else "a finite number"
    said = f" ({source})" if source else ""

    def parse(raw: str) -> int | float:
        try:
            value = kind(raw)
        except ValueError:
            value = math.nan
        wrong = None if math.isfinite(value) else f"is not {what}"
        if wrong is None and least is not None and value < least:
            wrong = f"is less than {least:g}" if least else "is negative"
        if wrong is None and positive and value <= 0:
            wrong = "is not positive"
        if wrong is not None:
            raise argparse.ArgumentTypeError(f"{raw!r} {wrong}{said}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


#: The highest TCP port.
MAX_PORT = 65535


def port(source: str = "") -> Callable[[str], int]:
    """A port flag's type: a whole number a socket can bind, 0 for a free one. Every port flag
    of every command says a wrong one the same way; ``source`` as for `number`."""
    said = f" ({source})" if source else ""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if not 0 <= value <= MAX_PORT:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a port, 0 to {MAX_PORT}{said}")
        return value

    parse.__name__ = "port"  # argparse names the type in its own messages
    return parse


def checked(check: Callable[[str, str], str]) -> Callable[[str], str]:
    """An argparse type from a spec check, ``check(value, field)``: argparse names the flag, so
    the type says only what is wrong with the value and what to give."""

    def parse(raw: str) -> str:
        try:
            return check(raw, "")
        except errors.InvalidInput as e:
            raise argparse.ArgumentTypeError(e.problem) from None

    parse.__name__ = check.__name__  # argparse names the type in its own messages
    return parse


#: ``--eventhub-namespace``: x.servicebus.windows.net (host:port for a local emulator).
eventhub_namespace = checked(specvalues.fully_qualified_namespace)
#: ``--hub``: an Event Hub's name.
event_hub = checked(specvalues.event_hub_name)
#: ``--consumer-group``: $Default or a consumer group's name.
consumer_group = checked(specvalues.consumer_group)
#: ``--container``: a blob container's name.
container = checked(specvalues.container_name)
#: ``--account-url``: https://<account>.blob.core.windows.net.
account_url = checked(specvalues.account_url)


def consumer_name(raw: str) -> str:
    """NAME's type: an EventHubConsumer's name, refused before the kubeconfig is read when no
    consumer can have it. '' and '.' asked for the namespace's whole list, which was then
    read as one consumer ("spec.eventHub: is required", "None/None: no status yet")."""
    if not specvalues.is_object_name(raw):
        raise argparse.ArgumentTypeError(
            f"{raw[:80]!r} is not an {specs.KIND}'s name ({specvalues.OBJECT_NAME_RULE}): "
            "give one as `ehb status -n NAMESPACE` lists them"
        )
    return raw


def partition_id(raw: str) -> str:
    """``--partition``'s type: an Event Hubs partition id (0, 1, ...). Anything else matched no
    blob, and the command said there was nothing, as for a partition without any."""
    if not bounds.is_partition_id(raw):
        raise argparse.ArgumentTypeError(
            f"{raw[:80]!r} is not a partition id: give one of the hub's, 0 to its count less one"
        )
    return raw


def namespace_name(raw: str) -> str:
    """``-n``'s type: a namespace's name; '' is the kubeconfig context's, as kubectl takes it."""
    if raw:
        try:
            namespacepatterns.name(raw, field="--namespace")
        except errors.InvalidInput as e:
            raise argparse.ArgumentTypeError(e.problem) from None
    return raw


#: What an empty value usually is: a variable that was not set, expanded in the flag.
UNSET = "(an unset variable in the flag gives '')"


def given(what: str, advice: str) -> Callable[[str], str]:
    """A flag's type that refuses an empty or blank value, which names nothing: `--host ''`
    listened on every address, `--crash-marker-dir ''` noted handler calls in the working
    directory, which no restart keeps, and `--metrics-cert-dir ''` served a self-signed
    certificate, each without a word. ``what`` is what the value must be, ``advice`` what to
    give instead."""

    def parse(raw: str) -> str:
        if not raw.strip():
            raise argparse.ArgumentTypeError(f"{raw!r} is not {what}: {advice} {UNSET}")
        return raw

    parse.__name__ = "given"  # argparse names the type in its own messages
    return parse


#: ``--host`` and ``--metrics-host``: an address this machine listens on.
listen_address = given("an address", "give one of this machine's, or 0.0.0.0 for all of them")
