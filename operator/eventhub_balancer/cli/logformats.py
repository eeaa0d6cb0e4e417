"""How `ehb` writes its log records: text for people, or one JSON object per line for a log store.

Log stores (Loki, Elasticsearch, Azure Monitor) filter by field, and the question on a bad
night is "everything about partition 7 of shop/orders". So a JSON record carries
``consumer``, ``namespace``, ``pod`` and ``partition`` whenever the record concerns them. The
fields come, first found wins, from: the record's own attributes (``logger.info(...,
extra={"partition": "7"})``); kopf's object reference (``k8s_ref``) on records about an
object; the project's message conventions (``"partition %s: ..."``, ``"%s/%s: ..."`` for
namespace/consumer, as the operator and the consumer runtime write them); and the process's
identity (``ehb consume`` knows its consumer, pod and namespace).
"""

from __future__ import annotations

import datetime
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, Final

#: The values of ``--log-format``.
TEXT: Final = "text"
JSON: Final = "json"
FORMATS: Final = (TEXT, JSON)

#: The text format: one line, time first, as `ehb` always printed it.
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: The loggers of the SDKs the product drives. The Event Hubs SDK logs every AMQP state change
#: at INFO ("Link state changed", on every link's keep-alive): one idle 32-partition consumer
#: made ``ehb -v operator`` (the chart's default verbosity) write about 180 lines a second.
SDK_LOGGERS: Final = ("azure", "uamqp", "pyamqp")

#: The HTTP library under the Kubernetes client. Its WARNING per retried request ("Retrying
#: ... Connection refused") told three times, each a screen wide, what the one error after
#: it says: below ``-vv`` it shows errors only.
HTTP_LOGGER: Final = "urllib3"

#: The context fields a JSON record may carry, in output order.
CONTEXT_FIELDS: Final = ("consumer", "namespace", "pod", "partition")

#: Placeholders of a %-style format string (``%%`` is a literal percent sign).
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*[0-9*]*(?:\.[0-9*]+)?[a-zA-Z%]")


def _placeholders(msg: str) -> list[tuple[int, str]]:
    """(offset, placeholder) of each argument-taking placeholder of ``msg``."""
    return [(m.start(), m.group()) for m in _PLACEHOLDER.finditer(msg) if m.group() != "%%"]


def _from_message(record: logging.LogRecord) -> dict[str, str]:
    """Fields the project's messages state by convention: ``partition %s`` and a leading
    ``%s/%s:`` (namespace/consumer) or ``%s:`` holding ``namespace/consumer``."""
    msg, args = record.msg, record.args
    if not isinstance(msg, str) or not isinstance(args, tuple) or not args:
        return {}
    found: dict[str, str] = {}
    placeholders = _placeholders(msg)
    for index, (offset, _) in enumerate(placeholders[: len(args)]):
        if msg[:offset].endswith("partition ") and "partition" not in found:
            found["partition"] = str(args[index])
    if msg.startswith("%s/%s:") and len(args) >= 2:
        found["namespace"], found["consumer"] = str(args[0]), str(args[1])
    elif msg.startswith("%s:") and isinstance(args[0], str) and args[0].count("/") == 1:
        found["namespace"], found["consumer"] = args[0].split("/")
    return found


def _from_kopf(record: logging.LogRecord) -> dict[str, str]:
    """kopf's per-object loggers attach the object they log about."""
    ref = getattr(record, "k8s_ref", None)
    if not isinstance(ref, Mapping):
        return {}
    found: dict[str, str] = {}
    if ref.get("namespace"):
        found["namespace"] = str(ref["namespace"])
    kind, name = ref.get("kind"), ref.get("name")
    if name and kind == "EventHubConsumer":
        found["consumer"] = str(name)
    elif name and kind == "Pod":
        found["pod"] = str(name)
    return found


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, context fields, exception."""

    def __init__(self, *, identity: Mapping[str, str] | None = None) -> None:
        super().__init__()
        #: What this process is (``ehb consume``: its consumer, pod and namespace).
        self.identity = {k: v for k, v in (identity or {}).items() if k in CONTEXT_FIELDS and v}

    def context(self, record: logging.LogRecord) -> dict[str, str]:
        explicit = {
            k: str(getattr(record, k))
            for k in CONTEXT_FIELDS
            if getattr(record, k, None) not in (None, "")
        }
        merged: dict[str, str] = {}
        for source in (self.identity, _from_message(record), _from_kopf(record), explicit):
            merged.update(source)  # later sources are more specific
        return {k: merged[k] for k in CONTEXT_FIELDS if k in merged}

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self.context(record),
        }
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` installs, so that a second call replaces only its own."""


def quiet_sdk_loggers(level: int) -> None:
    """The SDKs' loggers (`SDK_LOGGERS`) at WARNING, and the HTTP library's (`HTTP_LOGGER`)
    at ERROR, unless ``level`` is DEBUG or lower (``-vv``): ``-v`` is for what ehb does, not
    for every AMQP frame or retried request under it."""
    for name in SDK_LOGGERS:
        logging.getLogger(name).setLevel(
            logging.NOTSET if level <= logging.DEBUG else logging.WARNING
        )
    logging.getLogger(HTTP_LOGGER).setLevel(
        logging.NOTSET if level <= logging.DEBUG else logging.ERROR
    )


def configure(*, level: int, log_format: str, identity: Mapping[str, str] | None = None) -> None:
    """Send the root logger's records to stderr in ``log_format`` at ``level``, the SDKs'
    below ``-vv`` left out (`quiet_sdk_loggers`): every command, ``ehb operator`` and
    ``ehb consume`` alike.

    As ``logging.basicConfig``: a process whose logging is set up already (an embedding
    program, pytest's capture) keeps its handlers and level.
    """
    quiet_sdk_loggers(level)
    root = logging.getLogger()
    if any(not isinstance(h, _Handler) for h in root.handlers):
        return
    handler = _Handler()
    if log_format == JSON:
        handler.setFormatter(JsonFormatter(identity=identity))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root.handlers[:] = [handler]
    root.setLevel(level)
