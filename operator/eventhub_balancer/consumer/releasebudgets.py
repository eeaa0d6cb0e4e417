"""Whether this pod's release fits in the operator's wait for it.

At a revocation the operator waits ``handoffTimeoutSeconds`` (30 s by default) for the pod to
release the partition, then assigns it anyway, at a higher epoch. The pod's release takes up
to ``--release-timeout`` for the batch in flight, and a handler that ignores cancellation
(a sync handler's thread) up to ``--handler-exit-seconds`` more, after which the process
exits. When the two together reach the operator's wait, a batch still in flight when the
wait ends is processed by the next owner while this pod still runs it, out of order.

The consumer chart derives both from one place, so its pods always fit; a workload of its
own, or a timeout changed on the EventHubConsumer later, may not. The operator writes the
timeout in the pod's ConfigMap when it is not the default
(``contracts.configmaps.KEY_HANDOFF_TIMEOUT_SECONDS``); the pod says once per value when its
release may outlast it, with what to change. It changes nothing itself: a release cut short
to fit would cancel batches that would have finished.
"""

from __future__ import annotations

import logging

from eventhub_balancer.consumer import batchsettings
from eventhub_balancer.contracts import specs

logger = logging.getLogger(__name__)


def overrun(settings: batchsettings.BatchSettings, handoff_timeout_seconds: int | None) -> str:
    """What to change when the release may outlast the operator's wait; empty when it fits.

    None is the default timeout (not written), or an operator from before the key, which
    waited as long."""
    handoff = (
        specs.DEFAULT_HANDOFF_TIMEOUT_SECONDS
        if handoff_timeout_seconds is None
        else handoff_timeout_seconds
    )
    release = settings.release_timeout + settings.handler_exit_timeout
    if release < handoff:
        return ""
    return (
        f"a release may take {release:g} s (--release-timeout {settings.release_timeout:g} "
        f"+ --handler-exit-seconds {settings.handler_exit_timeout:g}), and the operator waits "
        f"{handoff} s (handoffTimeoutSeconds) before it gives a revoked partition to its next "
        "owner: a batch still in flight then is processed twice at once. Lower the two flags "
        f"below {handoff} s together, or raise spec.balancing.handoffTimeoutSeconds above "
        f"{release:g}"
    )


class ReleaseBudget:
    """Says once per hand-off timeout read whether the pod's release fits in it."""

    def __init__(self, settings: batchsettings.BatchSettings) -> None:
        self.settings = settings
        self.checked: int | None = None
        self.said = False

    def read(self, handoff_timeout_seconds: int | None) -> None:
        """An assignment was read with this timeout: warn when it changed and is overrun."""
        if self.said and handoff_timeout_seconds == self.checked:
            return
        self.checked, self.said = handoff_timeout_seconds, True
        advice = overrun(self.settings, handoff_timeout_seconds)
        if advice:
            logger.warning("hand-off: %s", advice)
