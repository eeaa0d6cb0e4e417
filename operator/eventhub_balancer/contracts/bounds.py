"""The bounds of every value that crosses a trust boundary: epochs, partition ids, annotations.

What a consumer pod writes (its acknowledgement annotations), what anyone with write access to
the blob container writes (a checkpoint's epoch) and what a CR's author writes are untrusted:
a value out of these bounds is ignored (or the spec is invalid) and said so, never carried into
a write that the API server would then reject in every later cycle.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

#: The largest int64: what Event Hubs' numbers (sequence numbers, offsets, owner levels), the
#: CRD's integers and the SDK's and KEDA's readers of a checkpoint all hold.
INT64_MAX: Final = 2**63 - 1
#: Epochs are int64 everywhere: Event Hubs' ``owner_level``, the CRD's ``status.epochs``.
MAX_EPOCH: Final = INT64_MAX
#: The highest epoch accepted as a floor: the successor (epoch + 1) must still fit in int64.
MAX_FLOOR: Final = MAX_EPOCH - 1
#: Event Hubs partition ids are "0".."N-1" and a hub has at most a few thousand partitions;
#: five digits leave ample room without letting a forged key grow without bound. ``\Z``, as
#: ``$`` would let "7\n" through.
_PARTITION_ID: Final = re.compile(r"^(0|[1-9][0-9]{0,4})\Z")
#: The most a pod's acknowledgement annotation may hold. A ``released`` value for 4,096
#: partitions at 19-digit epochs is about 110 KB; anything longer is not an acknowledgement.
MAX_ANNOTATION_BYTES: Final = 128 * 1024


def is_epoch(value: object) -> bool:
    """An int64 epoch, 0..2^63-1 (bool is not an int here)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_EPOCH


def is_floor(value: object) -> bool:
    """An epoch that leaves room for a successor."""
    return is_epoch(value) and isinstance(value, int) and value <= MAX_FLOOR


def is_partition_id(value: object) -> bool:
    return isinstance(value, str) and _PARTITION_ID.match(value) is not None


def loads(text: str) -> Any:
    """``json.loads`` for untrusted text: nesting deeper than the decoder's recursion (128 KiB
    of ``[`` is 130,000 levels) is a ValueError like any other malformed JSON, not the
    RecursionError the decoder raises."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def printable(text: str) -> str:
    """``text`` with each character a terminal could act on written as its escape (``\\x1b``,
    ``\\u202e``): control characters, format characters (a right-to-left override), separators
    other than the space. Text that tenants write (a pod's error, a spec's names) reaches an
    admin's terminal through the status, the Events, the log and ``ehb``; an escape sequence
    there moves the cursor over other lines, rewrites them, or sets the clipboard."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
