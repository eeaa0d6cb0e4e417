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
"""

from __future__ import annotations

from typing import Any

import urllib3.exceptions
import urllib3.util


class Retries(urllib3.util.Retry):
    """urllib3's retries, less those of a request that timed out (connecting or reading)."""

    def increment(self, *args: Any, **kwargs: Any) -> Retries:
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
