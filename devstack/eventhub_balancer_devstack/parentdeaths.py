"""A child process of the local stack ends when the process that started it ends.

Azurite and the control plane's binaries run in sessions of their own, so that a stop reaches
everything they spawn and a Ctrl-C at the terminal reaches only us. The price: when we end
without stopping them (SIGKILL, or a harness killed outright past its stop bound), nothing
would reach them, and they would keep their ports. prctl(2)'s PR_SET_PDEATHSIG, set in the
child before exec, has the kernel send them SIGTERM then.

Linux only; elsewhere the children are stopped by their owners' ``stop`` alone. The signal
goes when the *thread* that started the child ends: start them from a thread that outlives
them (the main thread, as every caller here does).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
from typing import Any, Final

#: prctl(2)'s option that sends the child a signal when its parent ends.
_PR_SET_PDEATHSIG: Final = 1


def _find_prctl() -> Any:
    """prctl(2) from the C library this process runs on; None where there is none."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


#: Looked up here, in the parent: between fork and exec the child should call as little as
#: it can (another thread of the parent may have held the dynamic loader's lock at the fork).
_PRCTL: Final = _find_prctl()


def die_with_parent() -> None:
    """``preexec_fn`` for `subprocess.Popen`: in the child, before exec, ask for SIGTERM when
    the parent ends. Does nothing where prctl(2) is missing."""
    if _PRCTL is not None:
        with contextlib.suppress(OSError):
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
