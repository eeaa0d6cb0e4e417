"""The namespaces an install names on the operator's command line, checked before it connects.

Three flags name Kubernetes namespaces, each in its own way:

- ``--namespace`` (the namespaces served) takes a name or one of kopf's patterns: globs
  separated by commas, ``*`` and ``?`` in them, and a ``!`` before a glob that takes
  namespaces out (``team-*, !team-sandbox``). kopf watches a value without ``*``, ``?``, ``!``
  or ``,`` as a namespace's name, in the URL (``[ab]`` too: it is no wildcard there), and
  matches the others against the namespaces it lists.
- ``--identity-namespace`` (who may use the operator's own identity) takes one name or one
  `fnmatch` glob (``*``, ``?``, ``[...]``) per flag: no ``!`` and no commas, so that what it
  lends is only ever what is listed.
- ``--bind-location NS=HOST`` takes one namespace's name.

A value no namespace could ever match was taken as it came: ``--namespace ''`` (a variable
left unset) made kopf watch the URL ``/api/v1/namespaces/pods`` and log a traceback on each
retry, and ``--namespace Team-A`` served nothing and said nothing. Each is refused here with an
`errors.InvalidInput` that names the flag and says what to give instead.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from eventhub_balancer import errors

#: A namespace's name: a DNS-1123 label, as the API server requires of it.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_NAME_MAX = 63
_NAME_RULE = "lowercase letters, digits and '-', starting and ending with a letter or digit"


@dataclasses.dataclass(frozen=True)
class Globs:
    """The globs a flag takes: the characters that make a value one, and all it may hold."""

    wildcards: frozenset[str]
    allowed: re.Pattern[str]
    said: str


#: kopf's (``--namespace``): ``[`` is no wildcard to kopf, which watches such a value as a name.
KOPF = Globs(frozenset("*?"), re.compile(r"^[-a-z0-9*?]+\Z"), "* and ?")
#: `fnmatch`'s (``--identity-namespace``).
FNMATCH = Globs(frozenset("*?["), re.compile(r"^[-a-z0-9*?\[\]]+\Z"), "*, ? and [...]")


def is_pattern(value: str) -> bool:
    """Whether kopf takes the ``--namespace`` value for a pattern, to match against the
    namespaces it lists, rather than for a name to watch as given (kopf's own test, in
    ``select_specific_namespaces``)."""
    return any(c in value for c in "*?!,")


def is_name(value: str) -> bool:
    """Whether ``value`` is a namespace's name as the API server takes it."""
    return len(value) <= _NAME_MAX and _NAME.match(value) is not None


def name(value: str, *, field: str) -> str:
    """``value``, a namespace's name; else `errors.InvalidInput` naming ``field``."""
    if not is_name(value):
        raise errors.InvalidInput(
            field,
            f"{value[:80]!r} is not a namespace's name: give one of {_NAME_MAX} characters at "
            f"most, {_NAME_RULE}",
        )
    return value


def _glob(value: str, globs: Globs, *, field: str, whole: str) -> None:
    """One glob of the value ``whole``: a name, or a name's characters with ``globs``."""
    if not value:
        raise errors.InvalidInput(
            field,
            f"{whole[:80]!r} has an empty part: give a namespace's name or a glob such as "
            "team-* (an unset variable in the flag gives '')",
        )
    if globs.wildcards.isdisjoint(value):
        name(value, field=field)
    elif len(value) > _NAME_MAX or globs.allowed.match(value) is None:
        raise errors.InvalidInput(
            field,
            f"{whole[:80]!r}: the glob {value[:80]!r} can match no namespace: use {_NAME_RULE}, "
            f"and {globs.said} as wildcards",
        )


def served(values: Iterable[str], *, field: str = "--namespace") -> tuple[str, ...]:
    """The ``--namespace`` values, each a name or a kopf pattern (see the module's text)."""
    patterns = tuple(values)
    for value in patterns:
        if value != value.strip():
            raise errors.InvalidInput(
                field, f"{value[:80]!r} has spaces around it: give {value.strip()[:80]!r}"
            )
        for part in value.split(","):
            glob = part.strip()
            glob = glob[1:] if glob.startswith("!") else glob
            _glob(glob, KOPF, field=field, whole=value)
    return patterns


def lent(values: Iterable[str], *, field: str = "--identity-namespace") -> tuple[str, ...]:
    """The ``--identity-namespace`` values: one name or one glob each, none taking any out."""
    patterns = tuple(values)
    for value in patterns:
        if "!" in value or "," in value:
            raise errors.InvalidInput(
                field,
                f"{value[:80]!r}: give one namespace or glob per flag, without '!' or ',': the "
                "identity is lent only to the namespaces listed, never to all but some",
            )
        _glob(value, FNMATCH, field=field, whole=value)
    return patterns
