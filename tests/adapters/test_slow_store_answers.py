"""A storage account that answers, but slower than one attempt may take (an account under
load): the retry budget gives each attempt after a timed-out one longer, so that such a store
is slow for the checkpoint store rather than unreachable. On fake time."""

from __future__ import annotations

import asyncio
import random

import pytest

from eventhub_balancer import errors
from eventhub_balancer.adapters import retrying

pytestmark = pytest.mark.looptime


def budget(**policy: float) -> retrying.Budget:
    return retrying.Budget(
        policy=retrying.RetryPolicy(seed=1, **policy),  # type: ignore[arg-type]
        rng=random.Random(1),
        operation="test op",
    )


def answering_after(seconds: float) -> tuple[object, list[float]]:
    """A request answered ``seconds`` after it is sent, and when each was sent."""
    sent: list[float] = []

    async def request() -> str:
        sent.append(asyncio.get_running_loop().time())
        await asyncio.sleep(seconds)
        return "answer"

    return request, sent


@pytest.mark.parametrize("answer_s", [5.5, 7.0, 9.0])
async def test_answers_slower_than_the_attempt_timeout_arrive_within_the_budget(
    answer_s: float,
) -> None:
    """With the default budget (20 s, 5 s a request), a store answering in 5.5 to 9 s: each
    attempt used to time out at 5 s, until the budget was spent."""
    request, sent = answering_after(answer_s)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await retrying.call_with_retries(budget(), request) == "answer"  # type: ignore[arg-type]
    assert len(sent) == 2
    assert loop.time() - started < 20.0


async def test_each_timed_out_attempt_doubles_the_next_ones_timeout_within_the_budget() -> None:
    request, sent = answering_after(60.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.CheckpointStoreUnreachable, match="timed out"):
        await retrying.call_with_retries(budget(), request)  # type: ignore[arg-type]
    offsets = [round(t - started, 1) for t in sent]
    # 5 s, then 10 s, then what is left of the 20 s (after the short pauses between).
    assert len(offsets) == 3
    assert offsets[0] == 0.0
    assert 5.0 <= offsets[1] < 5.1
    assert 15.0 <= offsets[2] < 15.2
    assert 20.0 <= loop.time() - started < 20.3


async def test_a_quick_failure_after_a_timeout_does_not_shorten_the_next_attempt() -> None:
    """The longer timeout is earned by a timeout and kept for the operation: a store that
    answers slowly keeps answering slowly."""
    outcomes = iter(["slow", "busy"])  # then slow again
    sent: list[float] = []

    async def request() -> str:
        sent.append(asyncio.get_running_loop().time())
        match next(outcomes, "slow"):
            case "slow":
                await asyncio.sleep(8.0)
                return "answer"
            case _:
                error = retrying.azure_errors.HttpResponseError(message="busy")
                error.status_code = 503
                raise error

    assert await retrying.call_with_retries(budget(), request) == "answer"
    assert len(sent) == 3


async def test_a_store_that_never_answers_is_said_to_have_spent_the_seconds_not_the_attempts() -> (
    None
):
    """The status said ``gave up (budget 100 attempts, 20 s)`` of a store that had timed out
    three times: it read as 100 attempts made. It names the limit that was reached."""
    request, _ = answering_after(60.0)
    with pytest.raises(errors.CheckpointStoreUnreachable) as raised:
        await retrying.call_with_retries(budget(), request)  # type: ignore[arg-type]
    assert (
        raised.value.steady == "test op: gave up, its budget of 20 s spent; last error: timed out"
    )
    assert raised.value.cause == (
        "gave up on the checkpoint store, a call's budget of 20 s spent; last error: timed out"
    )
    assert "gave up after 3 attempt(s) over 20." in str(raised.value)  # the log's: what was done
