"""Who is asking, and may they: TokenReview and SubjectAccessReview through the API server.

The operator's metrics name every tenant's consumers, pods and backlogs, so ``/metrics`` is
served only to callers the cluster's own RBAC allows ``get`` on that path (a
``nonResourceURLs: [/metrics]`` rule, as Prometheus is granted it). The operator does what
controller-runtime's metrics filter (``filters.WithAuthenticationAndAuthorization``) does: the
caller's bearer token goes to a TokenReview, the user it names to a SubjectAccessReview with
the request's path and lower-cased method. Answers are kept as that filter keeps them (a token
a minute; an allowed user five minutes, a denied one half a minute), so a scrape every 30 s
costs the API server nothing most of the time; the caches are bounded.

What the caches do not answer is bounded too, because anyone who reaches the port can send a
new token with each request: requests that need the same review at once share it, at most
`REVIEWS_AT_ONCE` reviews run, `REVIEWS_WAITING` more wait, and past that a request is
refused at once (`Busy`, 429) rather than queued. Without the bound, a flood of forged tokens
sent the API server a TokenReview each and filled the loop's default thread pool, which
kopf's and the Event Hubs clients' name lookups need, so the operator's own connections and
Prometheus' scrapes waited behind the flood.

The calls run in threads of their own (the ``kubernetes`` client is synchronous), with the
operator's own credentials: its role needs ``create`` on ``tokenreviews`` and
``subjectaccessreviews``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Final, Generic, TypeVar

import kubernetes.client
import urllib3.exceptions
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import kubeclients

#: How long a token's review is kept, authenticated or not (controller-runtime's CacheTTL).
TOKEN_SECONDS: Final = 60.0
#: How long an allowed and a denied decision are kept (its AllowCacheTTL, DenyCacheTTL).
ALLOWED_SECONDS: Final = 300.0
DENIED_SECONDS: Final = 30.0
#: Entries each cache keeps; beyond, the least recently used goes (a caller sending ever new
#: tokens must not grow the operator).
CACHED: Final = 1024
#: Seconds for one review: a slow API server fails the scrape, never hangs it.
REQUEST_TIMEOUT: Final = 10.0
#: Reviews sent to the API server at once (threads of their own, not the loop's default pool).
REVIEWS_AT_ONCE: Final = 4
#: Reviews that may wait for one of those threads; past that a request is answered 429 at once.
REVIEWS_WAITING: Final = 60

V = TypeVar("V")


@dataclasses.dataclass(frozen=True, kw_only=True)
class User:
    """Who a TokenReview says a token is."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> User:
        extra = body.get("extra") or {}
        return cls(
            name=str(body.get("username") or ""),
            uid=str(body.get("uid") or ""),
            groups=tuple(str(g) for g in body.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )


class Busy(errors.ApiUnavailable):
    """Too many reviews are under way already: the caller should come back later (429)."""


class _Kept(Generic[V]):
    """A bounded cache whose entries expire (each with its own lifetime)."""

    def __init__(self, *, clock: Callable[[], float], size: int = CACHED) -> None:
        self._clock = clock
        self._size = size
        self._entries: collections.OrderedDict[Hashable, tuple[float, V]] = (
            collections.OrderedDict()
        )

    def get(self, key: Hashable) -> tuple[bool, V | None]:
        found = self._entries.get(key)
        if found is None or found[0] <= self._clock():
            self._entries.pop(key, None)
            return False, None
        self._entries.move_to_end(key)
        return True, found[1]

    def put(self, key: Hashable, value: V, *, seconds: float) -> None:
        self._entries[key] = (self._clock() + seconds, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class AccessReviews:
    """TokenReviews and SubjectAccessReviews with the operator's credentials, cached."""

    def __init__(
        self,
        configuration: kubernetes.client.Configuration,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = kubernetes.client.ApiClient(configuration)
        self._authentication = kubernetes.client.AuthenticationV1Api(self._client)
        self._authorization = kubernetes.client.AuthorizationV1Api(self._client)
        self._tokens: _Kept[User | None] = _Kept(clock=clock)
        self._decisions: _Kept[bool] = _Kept(clock=clock)
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=REVIEWS_AT_ONCE, thread_name_prefix="ehb-access-review"
        )
        #: the reviews under way, by what they review: a second asker awaits the first's
        self._under_way: dict[Hashable, asyncio.Future[Any]] = {}
        #: reviews that went to the API server, for tests
        self.reviews = 0

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._client.close()  # type: ignore[no-untyped-call]

    async def _once(self, key: Hashable, review: Callable[[], Awaitable[V]]) -> V:
        """``review()``, or the same review already under way; `Busy` past the bound."""
        under_way = self._under_way.get(key)
        if under_way is None:
            if len(self._under_way) >= REVIEWS_AT_ONCE + REVIEWS_WAITING:
                raise Busy(f"{len(self._under_way)} access reviews under way already")
            under_way = asyncio.ensure_future(review())
            self._under_way[key] = under_way

            def done(future: asyncio.Future[Any]) -> None:
                self._under_way.pop(key, None)
                if not future.cancelled():
                    future.exception()  # read, even when every asker has gone

            under_way.add_done_callback(done)
        # One asker hanging up must not cancel the review the others await.
        result: V = await asyncio.shield(under_way)
        return result

    async def user(self, token: str) -> User | None:
        """Who ``token`` is (None: not a valid token for the API server's audiences).

        Raises `errors.ApiUnavailable` when the API server does not answer."""
        kept, found = self._tokens.get(token)
        if kept:
            return found
        return await self._once(("token", token), lambda: self._review_token(token))

    async def _review_token(self, token: str) -> User | None:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        answer = await self._call("TokenReview", self._authentication.create_token_review, body)
        status = answer.get("status") or {}
        user = User.of(status.get("user") or {}) if status.get("authenticated") is True else None
        if user is not None and not user.name:
            user = None
        self._tokens.put(token, user, seconds=TOKEN_SECONDS)
        return user

    async def allowed(self, user: User, *, verb: str, path: str) -> bool:
        """Whether RBAC (or whatever authorizes the cluster) lets ``user`` ``verb`` ``path``."""
        key = (user, verb, path)
        kept, found = self._decisions.get(key)
        if kept:
            return bool(found)
        return await self._once(("decision", key), lambda: self._review_access(user, verb, path))

    async def _review_access(self, user: User, verb: str, path: str) -> bool:
        key = (user, verb, path)
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        answer = await self._call(
            "SubjectAccessReview", self._authorization.create_subject_access_review, body
        )
        decision = (answer.get("status") or {}).get("allowed") is True
        self._decisions.put(key, decision, seconds=ALLOWED_SECONDS if decision else DENIED_SECONDS)
        return decision

    async def _call(self, what: str, fn: Callable[..., Any], body: Mapping[str, Any]) -> Any:
        self.reviews += 1

        def call() -> Any:
            raw = kubeclients.read_body(
                fn, body=body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            return json.loads(raw) if raw else {}

        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, call)
        except (kube_exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            status = getattr(e, "status", None)
            raise errors.ApiUnavailable(
                f"{what}: the API server answered {status or type(e).__name__}"
                + (
                    " (the operator's role needs create on tokenreviews and subjectaccessreviews)"
                    if status == 403
                    else ""
                )
            ) from e


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None without one)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
