"""Times as Kubernetes writes them: RFC 3339 in UTC with a Z, to the second.

The status, the ConfigMaps and the Events all carry times, written by the operator and by
the pods and read back by both; one writer and one lenient reader keep them comparable.
The moments of the partitions' ownership (the ``since`` of ``status.assignment``, of
``status.handoffs`` and of each ConfigMap's partitions) are kept to the millisecond
(`format_moment`): a grant and its revocation often fall within one second (pods that turn
Ready together), and telling the operator's own write not made yet from someone's edit
compares the two (`reconciling.fleets.revocation_unwritten`).
A time that cannot be read is None, never an exception: callers pick a fallback, since a
hand-edited or half-written object must not stop a cycle.
"""

from __future__ import annotations

import datetime


def format_time(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with a Z, as Kubernetes writes times (second precision)."""
    utc = value.astimezone(datetime.UTC).replace(microsecond=0, tzinfo=None)
    # isoformat, not strftime: "%Y" writes year 1 as "1", which no parser reads back.
    return utc.isoformat() + "Z"


def format_moment(value: datetime.datetime) -> str:
    """`format_time` to the millisecond (cut, not rounded), and to the second with no
    fraction when the milliseconds are 0, so that a time written before, to the second,
    reads back and is written again as the same text."""
    utc = value.astimezone(datetime.UTC).replace(tzinfo=None)
    if utc.microsecond < 1000:
        return format_time(value)
    return utc.isoformat(timespec="milliseconds") + "Z"


def parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 time in UTC, or None when it is missing or unreadable (callers pick a
    fallback). A time whose offset moves it past year 1 or 9999 in UTC
    (0001-01-01T00:00:00+01:00) is unreadable: it could be neither compared with now nor
    written back."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=datetime.UTC)
    try:
        return parsed.astimezone(datetime.UTC)
    except OverflowError:
        return None
