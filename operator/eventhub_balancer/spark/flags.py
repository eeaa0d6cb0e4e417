"""The Spark flags, checked before anything starts: ``--spark-master``, ``--spark-remote``,
``--spark-conf``.

Kept apart from ``spark.sessions``, which starts Spark, so that a mistyped URL fails when
the consumer's settings are read (``consumer.settings``), before anything connects and not
in the session's thread, and so that the checks can be read and tested without pyspark or a
JVM. A malformed flag is an `errors.InvalidInput` that names the flag and says what to
write; a master whose scheme is unknown (a cluster manager of someone's own) passes through.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final, NamedTuple

from eventhub_balancer import errors

#: Spark Connect's port when a ``sc://`` URL names none.
DEFAULT_CONNECT_PORT: Final = 15002

#: Masters that run in this process: ``local``, ``local[4]``, ``local[*]``, ``local[4,2]``
#: (with task retries), ``local-cluster[2,1,1024]`` (Spark's own test cluster).
_LOCAL_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]"
)
#: ``spark://host:port``, or several for a standby master: ``spark://a:7077,b:7077``.
_STANDALONE_MASTER = re.compile(r"spark://[^\s:/,]+:\d{1,5}(,[^\s:/,]+:\d{1,5})*")
#: A scheme: ``yarn``, ``k8s://https://...``, a cluster manager of someone's own.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(://\S+)?")


class ConnectAddress(NamedTuple):
    """Where a ``sc://`` URL points, and the URL to show (any token in it hidden)."""

    host: str
    port: int
    shown: str


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``--spark-conf key=value`` flags as a mapping; a malformed one names itself."""
    conf: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise errors.InvalidInput("--spark-conf", f"{pair!r} is not key=value")
        conf[key.strip()] = value.strip()
    return conf


def validate_master(master: str) -> str:
    """The master, checked for the mistakes a flag can make; unknown schemes pass through."""
    master = master.strip()
    field = "--spark-master"
    if not master:
        raise errors.InvalidInput(field, "is empty: write local[2], spark://HOST:PORT or yarn")
    if master.startswith("sc://"):
        raise errors.InvalidInput(
            field, f"{master!r} is a Spark Connect URL: pass it as --spark-remote instead"
        )
    if master.startswith("local"):
        if not _LOCAL_MASTER.fullmatch(master):
            raise errors.InvalidInput(
                field, f"{master!r} is not a local master: write local, local[N] or local[*]"
            )
        return master
    if master.startswith("spark:"):
        if not _STANDALONE_MASTER.fullmatch(master):
            raise errors.InvalidInput(
                field,
                f"{master!r} is not a standalone master URL: write spark://HOST:PORT "
                "(the master's port, 7077 unless changed)",
            )
        return master
    if re.fullmatch(r"[^\s:/]+:\d+", master):
        raise errors.InvalidInput(
            field, f"{master!r} has no scheme: write spark://{master} for a standalone master"
        )
    if not _SCHEME.fullmatch(master):
        raise errors.InvalidInput(
            field, f"{master!r} is not a master URL: write local[2], spark://HOST:PORT or yarn"
        )
    return master


def _shown(remote: str) -> str:
    """The URL without the values of its parameters that may be secrets (``;token=...``)."""
    head, sep, params = remote.partition(";")
    if not sep:
        return remote
    kept = []
    for param in params.split(";"):
        key, eq, _ = param.partition("=")
        kept.append(f"{key}=***" if eq and "token" in key.lower() else param)
    return head + sep + ";".join(kept)


def parse_remote(remote: str) -> ConnectAddress:
    """Host and port of a Spark Connect URL, ``sc://host[:port][/;param=value...]``."""
    remote = remote.strip()
    shown = _shown(remote)
    field = "--spark-remote"
    hint = "write sc://HOST:PORT, e.g. sc://spark-connect:15002"
    if not remote.startswith("sc://"):
        extra = (
            "; a spark:// or local master goes to --spark-master"
            if remote.startswith(("spark://", "local"))
            else ""
        )
        raise errors.InvalidInput(field, f"{shown!r} is not a Spark Connect URL: {hint}{extra}")
    parsed = urllib.parse.urlparse(remote.partition(";")[0])
    try:
        port = parsed.port
    except ValueError:
        raise errors.InvalidInput(field, f"{shown!r} has a bad port: {hint}") from None
    if not parsed.hostname:
        raise errors.InvalidInput(field, f"{shown!r} names no host: {hint}")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        raise errors.InvalidInput(
            field,
            f"{shown!r} has a path: {hint}, with parameters after '/;' "
            "(sc://HOST:PORT/;use_ssl=true;token=...)",
        )
    return ConnectAddress(parsed.hostname, port or DEFAULT_CONNECT_PORT, shown)
