"""What the fault proxy (`faultproxy`) does to the requests it forwards: the plan in force, the
seeded decisions, the counters, and the lease trap that leaves a checkpoint blob's lease held
by a writer killed mid-fence. Safe to change from any thread while the proxy serves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import threading
from collections.abc import Mapping

from eventhub_balancer.contracts import checkpointblobs

logger = logging.getLogger(__name__)

#: What a checkpoint blob's path holds (`checkpointblobs.blob_prefix`), as the proxy sees it.
_CHECKPOINTS = f"/{checkpointblobs.CHECKPOINT}/"

#: The longest a sprung lease trap holds its answer before dropping it (the harness normally
#: lets go within a second, once it killed the writer).
TRAP_HOLD_S = 30.0


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    """What to do to the requests from now on (rates are fractions of requests, 0..1)."""

    #: Seconds to hold a request before handling it; applied to ``delay_rate`` of requests.
    delay: float = 0.0
    delay_rate: float = 1.0
    #: Answer 500 or 503 (half each) without forwarding.
    status_5xx_rate: float = 0.0
    #: Close the connection without forwarding: the request never reached the upstream.
    drop_rate: float = 0.0
    #: Forward, then close the connection: the request took effect but its answer is lost.
    drop_response_rate: float = 0.0
    #: Answer 412 ConditionNotMet to the next n conditional writes (with If-Match).
    burst_412: int = 0
    #: Answer the next n requests as a throttled account does, without forwarding: 503
    #: ServerBusy, or 500 OperationTimedOut (``throttle_status``).
    burst_throttled: int = 0
    throttle_status: int = 503
    #: Forward, then hold the answer this long: the request took effect, its answer is slow.
    answer_delay: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("delay_rate", "status_5xx_rate", "drop_rate", "drop_response_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value} is not a fraction between 0 and 1")
        if min(self.delay, self.burst_412, self.burst_throttled, self.answer_delay) < 0:
            raise ValueError("delays and bursts must not be negative")
        if self.throttle_status not in (500, 503):
            raise ValueError(f"throttle_status={self.throttle_status} is not 500 or 503")


@dataclasses.dataclass(frozen=True)
class FaultStats:
    """What the proxy did so far."""

    requests: int = 0
    forwarded: int = 0
    delayed: int = 0
    injected_5xx: int = 0
    dropped: int = 0
    dropped_responses: int = 0
    injected_412: int = 0
    throttled: int = 0
    slow_answers: int = 0


@dataclasses.dataclass(frozen=True)
class _Decision:
    delay: float
    status: int | None  # an injected status, or None to forward
    drop_request: bool
    drop_response: bool
    answer_delay: float = 0.0
    #: An injected status is a throttled account's (`FaultPlan.burst_throttled`).
    throttled: bool = False


class Faults:
    """The plan in force and the counters; safe to change from any thread while serving."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plan = FaultPlan()
        self._rng = random.Random(0)
        self._burst_left = 0
        self._throttled_left = 0
        self._stats = FaultStats()
        self._trap_armed = False
        self._trapped: str | None = None
        self._trap_released = threading.Event()
        #: Per checkpoint blob, the highest epoch a forwarded write gave it (`refuse_fence`).
        self._epochs: dict[str, int] = {}

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    @property
    def stats(self) -> FaultStats:
        return self._stats

    def set(
        self,
        *,
        delay: float = 0.0,
        delay_rate: float = 1.0,
        status_5xx_rate: float = 0.0,
        drop_rate: float = 0.0,
        drop_response_rate: float = 0.0,
        burst_412: int = 0,
        burst_throttled: int = 0,
        throttle_status: int = 503,
        answer_delay: float = 0.0,
        seed: int | None = None,
    ) -> FaultPlan:
        """Replace the plan (unspecified faults are off)."""
        plan = FaultPlan(
            delay=delay,
            delay_rate=delay_rate,
            status_5xx_rate=status_5xx_rate,
            drop_rate=drop_rate,
            drop_response_rate=drop_response_rate,
            burst_412=burst_412,
            burst_throttled=burst_throttled,
            throttle_status=throttle_status,
            answer_delay=answer_delay,
            seed=seed,
        )
        with self._lock:
            self._plan = plan
            self._rng = random.Random(seed)
            self._burst_left = burst_412
            self._throttled_left = burst_throttled
        logger.info("fault plan: %s", plan)
        return plan

    def clear(self) -> None:
        """No faults: forward everything as is (a lease trap is released too)."""
        self.set()
        self.release_lease_trap()

    # -- the lease trap: a writer that dies holding a checkpoint blob's lease

    def arm_lease_trap(self) -> None:
        """Catch the next lease acquisition on a checkpoint blob: forward it (the lease is
        taken), then hold its answer until `release_lease_trap` and drop it, so that the
        writer never learns its lease id. The harness kills the writer meanwhile: a pod
        killed mid-fence, its lease left held.

        A fence takes a lease only when its first, unleased, write is refused (a race); while
        armed, the trap refuses that write (`refuse_fence`), so that the next fence is one
        that lost a race, and takes the lease the trap catches."""
        with self._lock:
            self._trap_armed = True
            self._trapped = None
            self._trap_released.clear()

    def lease_trapped(self) -> str | None:
        """The path of the blob whose lease the sprung trap holds, None before it sprang."""
        with self._lock:
            return self._trapped

    def release_lease_trap(self) -> None:
        """Let the held answer go (dropped) and disarm the trap."""
        with self._lock:
            self._trap_armed = False
        self._trap_released.set()

    def spring_trap(self, *, method: str, path: str, lease_action: str | None) -> bool:
        """Whether this forwarded request is the lease acquisition the armed trap catches (its
        answer is then held, `hold_trap`, and dropped)."""
        with self._lock:
            if not self._trap_armed or self._trapped is not None:
                return False
            if method != "PUT" or (lease_action or "").lower() != "acquire":
                return False
            if _CHECKPOINTS not in path:
                return False
            self._trapped = path
            return True

    def refuse_fence(self, *, method: str, path: str, headers: Mapping[str, str]) -> bool:
        """Whether to answer 412 to this request: while the lease trap is armed and has not
        sprung, an unleased conditional write that gives a checkpoint blob a higher epoch than
        any forwarded write gave it (a fence's first write; an owner's checkpoints keep its
        epoch)."""
        epoch = epoch_written(method=method, path=path, headers=headers)
        with self._lock:
            if not self._trap_armed or self._trapped is not None or epoch is None:
                return False
            if "x-ms-lease-id" in headers or "If-Match" not in headers:
                return False
            return epoch > self._epochs.get(path, 0)

    def forwarded(self, *, method: str, path: str, headers: Mapping[str, str], status: int) -> None:
        """Note the epoch a successful write gave a checkpoint blob."""
        epoch = epoch_written(method=method, path=path, headers=headers)
        if epoch is not None and 200 <= status < 300:
            with self._lock:
                self._epochs[path] = max(epoch, self._epochs.get(path, 0))

    async def hold_trap(self) -> None:
        # A threading event: the harness releases from its own thread.
        await asyncio.to_thread(self._trap_released.wait, TRAP_HOLD_S)

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = FaultStats()

    def _count(self, **increments: int) -> None:
        # Called with the lock held.
        self._stats = dataclasses.replace(
            self._stats,
            **{k: getattr(self._stats, k) + v for k, v in increments.items()},
        )

    def decide(self, *, method: str, conditional: bool) -> _Decision:
        with self._lock:
            plan, rng = self._plan, self._rng
            self._count(requests=1)
            delay = plan.delay if plan.delay and rng.random() < plan.delay_rate else 0.0
            if delay:
                self._count(delayed=1)
            if self._throttled_left > 0:
                self._throttled_left -= 1
                self._count(throttled=1)
                return _Decision(delay, plan.throttle_status, False, False, throttled=True)
            if conditional and method in ("PUT", "POST", "DELETE") and self._burst_left > 0:
                self._burst_left -= 1
                self._count(injected_412=1)
                return _Decision(delay, 412, False, False)
            if plan.drop_rate and rng.random() < plan.drop_rate:
                self._count(dropped=1)
                return _Decision(delay, None, True, False)
            if plan.status_5xx_rate and rng.random() < plan.status_5xx_rate:
                self._count(injected_5xx=1)
                return _Decision(delay, rng.choice((500, 503)), False, False)
            drop_response = bool(plan.drop_response_rate and rng.random() < plan.drop_response_rate)
            if drop_response:
                self._count(dropped_responses=1)
            self._count(forwarded=1)
            if plan.answer_delay and not drop_response:
                self._count(slow_answers=1)
            return _Decision(delay, None, False, drop_response, plan.answer_delay)


def epoch_written(*, method: str, path: str, headers: Mapping[str, str]) -> int | None:
    """The epoch a write to a checkpoint blob sets (its ``epoch`` metadata), if it is one."""
    if method != "PUT" or _CHECKPOINTS not in path:
        return None
    try:
        return int(headers.get(f"x-ms-meta-{checkpointblobs.EPOCH_KEY}", ""))
    except ValueError:
        return None
