"""How the consumer process ends itself when a handler cannot be stopped."""

from __future__ import annotations

import logging
import os
from typing import Final

logger = logging.getLogger(__name__)

#: The exit status when a handler outlived its release (EX_SOFTWARE).
EXIT_HANDLER_HUNG: Final = 70


def exit_now(reason: str) -> None:
    """End the process at once: a handler thread that cannot be stopped would keep it alive,
    processing what the next owner processes too (its epochs fence this process out)."""
    logger.critical("exiting with status %d: %s", EXIT_HANDLER_HUNG, reason)
    logging.shutdown()
    os._exit(EXIT_HANDLER_HUNG)
