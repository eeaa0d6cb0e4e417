"""When the consumers whose cycles the API server throttled try again.

API Priority and Fairness refuses the operator's requests with 429 and a ``Retry-After`` when
its ServiceAccount's priority level is full (a proxy or a server shedding load may answer 503
with one: the same throttle, `errors.ApiThrottled`). The client sends a refused read again after a
short ``Retry-After`` (`adapters.kuberetries`), never a write, so a throttle can refuse only
the writes. Each refused cycle backs off, doubling up to a minute (`registering`), and a
throttle that let the reads through left nothing to wake it: the pods' relisting wakes a
namespace's consumers only when it is listed again after a refusal (`cache.relisting`). A
pod deleted during such a throttle kept its partitions up to a minute after it ended.

`Throttle` is the operator's one record of the consumers it throttled, and of when one of
them is to try again:

- one of them, the probe, tries again after the ``Retry-After`` the server gave, at least
  `PROBE_MIN_SECONDS` and at most `PROBE_MAX_SECONDS`: one refused request per 1 to 5 s for
  the whole operator, however many consumers it runs;
- the others keep their own backoff (doubling up to a minute, never sooner than the server's
  ``Retry-After``), as before: about one request per consumer per minute once it has grown;
- when a throttled consumer's cycle has its writes accepted (the probe's, or another's at the
  end of its backoff), the throttle is over: every other throttled consumer is woken and runs
  its cycle at once. A write accepted for a consumer that was never refused ends nothing: a
  throttle of some namespaces' requests only (a FlowSchema distinguishing by namespace) must
  not wake the throttled ones at every write of the others;
- the probe's cycle that succeeds with no write to make proves nothing: the probe passes to
  another throttled consumer, woken for it.
"""

from __future__ import annotations

from collections.abc import Callable

Key = tuple[str, str]  # (namespace, name)

#: The probe waits the server's ``Retry-After`` within these bounds: kube-apiserver asks 1 s,
#: then 2, 4, 8 and 16 s while it keeps rejecting; 5 s keeps the end of a throttle seen within
#: a few seconds, at one refused request every 5 s.
PROBE_MIN_SECONDS = 1.0
PROBE_MAX_SECONDS = 5.0


class Throttle:
    """The consumers whose cycles were refused for the API server's load (429, or 503 with a
    ``Retry-After``), until one of them has its writes accepted. ``wake`` runs a consumer's
    cycle now (`Operator.wake`)."""

    def __init__(self, wake: Callable[[Key], None]) -> None:
        self._wake = wake
        #: the consumers refused, in the order they were first refused
        self.throttled: dict[Key, None] = {}
        #: the consumer that tries next at the server's pace, and when (loop time)
        self.probe: Key | None = None
        self._probe_at = 0.0

    def refused(self, key: Key, *, retry_after: float | None, backoff: float, now: float) -> float:
        """``key``'s cycle was refused for load (loop time ``now``), the server asking
        ``retry_after`` s: the seconds until it tries again. The probe's, or one whose turn is
        past (the probe went), is the server's ``Retry-After`` within the probe's bounds;
        any other's is its own ``backoff`` (`registering`: not sooner than the server
        asked)."""
        self.throttled.setdefault(key, None)
        asked = retry_after if retry_after is not None else 0.0
        if self.probe is None or self.probe == key or now >= self._probe_at:
            delay = min(PROBE_MAX_SECONDS, max(PROBE_MIN_SECONDS, asked))
            self.probe, self._probe_at = key, now + delay
            return delay
        return backoff

    def succeeded(self, key: Key, *, wrote: bool) -> None:
        """``key``'s cycle succeeded, its writes (if ``wrote``) accepted. A throttled one's
        accepted writes end the throttle: the others throttled are woken."""
        if key not in self.throttled:
            return
        del self.throttled[key]
        if wrote:
            waiting, self.throttled, self.probe = list(self.throttled), {}, None
            for other in waiting:
                self._wake(other)
        elif self.probe == key:
            self._pass_probe()

    def forget(self, key: Key) -> None:
        """``key``'s daemon stopped."""
        self.throttled.pop(key, None)
        if self.probe == key:
            self._pass_probe()

    def _pass_probe(self) -> None:
        """The probe will not try again: the next throttled consumer does, now."""
        self.probe = None
        if self.throttled:
            self._wake(next(iter(self.throttled)))
