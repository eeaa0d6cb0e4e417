"""What the Kubernetes client may send again by itself: the operator's and the pods'.

urllib3 retries a request three times when its connection fails or its answer does not come,
for a GET, PUT or DELETE, and a request that could not connect whatever its method. For a
request that timed out, that multiplied the bound it was given by four: the operator's reads,
bounded at 15 s, held a cycle up for a minute behind an API server that did not answer (and
its exit after SIGTERM), and a pod's acknowledgement patch, bounded at 2 s, held its thread
8 s, so a pod stopped in such an outage exited only after it ended. The timeout already took
the request's time, and the caller tries again anyway (the operator's next cycle, the pod's
watch backoff or next acknowledgement), so `Retries` sends again only what failed at once: a
refused connection, or a kept-alive one the server had closed.

urllib3 also sends a GET, PUT or DELETE answered 429, 503 or 413 again by itself, after the
``Retry-After`` the answer carries, which it honoured up to six hours: a proxy in front of the
API server that asked for an hour held the operator's read (a cycle, a relisting) and a pod's
read that hour, past every bound they were given. kube-apiserver itself asks for 1 s at first,
and while its API Priority and Fairness keeps rejecting, for 2, 4, 8 and 16 s
(`tests/realkube/wire/test_throttled_operator.py`): three waits of 16 s took a 15 s read to
nearly a minute. A wait up to `RETRY_AFTER_MAX_S` is still made, a longer one gives the answer
back to the caller at once, whose own pace (the next cycle, the next relisting, the pod's
watch backoff) decides when to ask again.
"""

from __future__ import annotations

from typing import Any

import urllib3.exceptions
import urllib3.util

#: The longest ``Retry-After`` waited within a request (three such waits at most: a few
#: seconds within the operator's 15 s and the pods' 10 s bounds); a longer one is not waited.
RETRY_AFTER_MAX_S = 2


class RetryAfterTooLong(urllib3.exceptions.ResponseError):
    """An answer not sent again for its ``Retry-After`` (longer than `RETRY_AFTER_MAX_S`): its
    status and the seconds it asked, for the caller's own pace."""

    def __init__(self, message: str, *, status: int, retry_after: float) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class Retries(urllib3.util.Retry):
    """urllib3's retries, less those of a request that timed out (connecting or reading), and
    those after a ``Retry-After`` longer than `RETRY_AFTER_MAX_S`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # An answer not sent again is given back as it is (the caller reads its status),
        # not as urllib3's "too many error responses".
        kwargs.setdefault("raise_on_status", False)
        super().__init__(*args, **kwargs)

    def increment(self, *args: Any, **kwargs: Any) -> Retries:
        response = kwargs.get("response")
        if response is not None and self.respect_retry_after_header:
            retry_after = self.get_retry_after(response)
            if retry_after is not None and retry_after > RETRY_AFTER_MAX_S:
                reason = RetryAfterTooLong(
                    f"answered {response.status} with Retry-After {retry_after:g} s, longer "
                    f"than the {RETRY_AFTER_MAX_S} s waited within a request",
                    status=response.status,
                    retry_after=retry_after,
                )
                url = kwargs.get("url", args[1] if len(args) > 1 else None)
                pool: Any = kwargs.get("_pool")
                raise urllib3.exceptions.MaxRetryError(pool, url, reason)
        error = kwargs.get("error")
        timed_out = isinstance(error, urllib3.exceptions.ReadTimeoutError) or (
            # urllib3 makes a refused connection a kind of connect timeout too.
            isinstance(error, urllib3.exceptions.ConnectTimeoutError)
            and not isinstance(error, urllib3.exceptions.NewConnectionError)
        )
        if timed_out:
            return super(Retries, self.new(total=0)).increment(*args, **kwargs)
        return super().increment(*args, **kwargs)


#: The client's retries for the project's Kubernetes clients (as many as urllib3's default).
def client_retries() -> Retries:
    return Retries(total=3)
