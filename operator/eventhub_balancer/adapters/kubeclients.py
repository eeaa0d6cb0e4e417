"""How the operator reaches the Kubernetes API: the client, its construction, its errors.

Split from `kubeapi` so that the one place that runs a blocking client call, counts it and
wraps its failure stays apart from the calls themselves (`kubereads`, `kubeapi`).

Why the official ``kubernetes`` client, run in a thread pool, rather than aiohttp by hand: it
already handles every way a cluster authenticates (kubeconfig with exec plugins and token
files, in-cluster ServiceAccount tokens that rotate, client certificates), and that is where
home-grown clients break. It is synchronous, so every call runs in a small private executor,
whose threads the namespaces (the tenants) take in turns (`callgates.FairGate`): a namespace
whose calls hang (a webhook there that answers only at its time-out) once took every thread
with one cycle's ConfigMap writes, and another tenant's status patch queued behind them, up
to their 15 s time-out each, eight at a time. A namespace may take `WORKERS` threads, and
`RESERVED` more are kept for the others. The turns are taken in the call's own namespace
(cluster-wide calls in none). The API server never runs on the operator's loop (the local one
has its own thread), so the client cannot deadlock on it. Bodies come back as plain dicts
(``_preload_content=False``), the same shape as kopf's bodies, so the pure code sees one
format. ``ApiException`` is wrapped into `errors` types here and nowhere else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import json
import os
import re
from collections.abc import Callable
from typing import Any, Self

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client import exceptions as kube_exceptions

from eventhub_balancer import errors
from eventhub_balancer.adapters import callgates, kuberetries

#: Seconds for one API request; a hung API server must not hang a cycle.
REQUEST_TIMEOUT = 15.0
#: Threads for blocking API calls that one namespace may use at once: cycles of several
#: consumers run concurrently.
WORKERS = 8
#: Threads beyond those, kept for the calls of the other namespaces (`callgates.FairGate`):
#: one namespace whose calls hang leaves them free, and one alone still has all `WORKERS`.
RESERVED = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConnectionInfo:
    """How to reach the API server, for kopf's login handler (same source as this adapter)."""

    server: str
    ca_path: str | None
    insecure: bool
    #: The ``Authorization`` scheme of ``token`` (``Bearer``), None when the header is the
    #: token alone.
    scheme: str | None
    token: str | None
    certificate_path: str | None
    private_key_path: str | None


#: The 403 messages of kube-apiserver's admission, not its authorization: a webhook's denial
#: and a ValidatingAdmissionPolicy's whose validation asks for reason Forbidden.
_ADMISSION_DENIAL = re.compile(
    r"admission webhook .* denied the request|ValidatingAdmissionPolicy .* denied request"
)


def _wrap(e: BaseException, what: str) -> errors.EventHubBalancerError:
    if isinstance(e, kube_exceptions.ApiException):
        status = e.status or 0
        reason = _reason(e)
        if status == 404:
            return errors.NotFound(f"{what}: not found")
        if status == 409:
            return errors.Conflict(f"{what}: conflict ({reason})")
        if status == 403 and _terminating(e):
            return errors.NamespaceTerminating(f"{what}: refused, the namespace is being deleted")
        if status == 403 and "exceeded quota:" in reason:
            return errors.QuotaExceeded(
                f"{what}: refused by a ResourceQuota ({reason}); raise its limit in the "
                "namespace, or free what it counts"
            )
        if status == 403 and _ADMISSION_DENIAL.search(reason):
            return errors.AdmissionDenied(
                f"{what}: refused by an admission policy ({reason}); it must let the "
                "operator's writes through"
            )
        if status == 403:
            return errors.Forbidden(
                f"{what}: forbidden ({reason}); grant the operator's ServiceAccount access"
            )
        if status == 422 or status == 400:
            return errors.ApiRejected(f"{what}: rejected ({status}: {reason})")
        retry_after = _retry_after(e.headers)
        if status == 429 or (status == 503 and retry_after is not None):
            # API Priority and Fairness (429), or a server or a proxy shedding load that says
            # when to come back (503 with a Retry-After): the daemon paces its next attempt by
            # the answer, as one throttle (`handlers.throttles`).
            return errors.ApiThrottled(
                f"{what}: API server answered {status} ({reason})", retry_after=retry_after
            )
        return errors.ApiUnavailable(f"{what}: API server answered {status} ({reason})")
    if isinstance(e, urllib3.exceptions.MaxRetryError):
        late = e.reason
        if isinstance(late, kuberetries.RetryAfterTooLong) and late.status in (429, 503):
            return errors.ApiThrottled(f"{what}: API server {late}", retry_after=late.retry_after)
        return errors.ApiUnavailable(f"{what}: {_unreachable(e)}")
    return errors.ApiUnavailable(f"{what}: {type(e).__name__}: {e}")


def _retry_after(headers: Any) -> float | None:
    """The seconds an answer's ``Retry-After`` asks, if any, read as the client's retries read
    it (`kuberetries`: urllib3's parser, a number or an HTTP date); unreadable is unsaid."""
    value = headers.get("Retry-After") if headers is not None else None
    if value is None:
        return None
    try:
        return float(kuberetries.client_retries().parse_retry_after(str(value)))
    except urllib3.exceptions.InvalidHeader:
        return None


def _unreachable(e: urllib3.exceptions.MaxRetryError) -> str:
    """No answer at all (refused, no such host, TLS, a timeout): where the server was looked
    for and what to check, rather than urllib3's repr of its pool and the URL."""
    pool = e.pool
    server = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else "its address"
    cause = e.reason.__cause__ if e.reason is not None else None
    if isinstance(cause, OSError) and cause.strerror:
        why = cause.strerror[:1].lower() + cause.strerror[1:]
    else:
        why = str(e.reason or e)
    return (
        f"cannot reach the Kubernetes API server at {server} ({why}): is it running, and is "
        "the kubeconfig's current context the cluster you mean?"
    )


def read_body(fn: Callable[..., Any], /, **kwargs: Any) -> bytes:
    """Make the call and read its whole body, in the worker thread, then give the connection
    back: read on the loop, a LIST's body of megabytes blocked every consumer's cycle, its
    connection stayed out of the pool meanwhile (the next call opened another, which the pool
    then discarded with a warning), and a connection broken mid-body escaped unwrapped."""
    response = fn(**kwargs)
    try:
        data: bytes = response.data
        return data
    finally:
        response.release_conn()


def _authorization(header: str | None) -> tuple[str | None, str | None]:
    """An ``Authorization`` value as the client holds it, split into its scheme and its token
    (RFC 7235): ``bearer abc`` is ``("Bearer", "abc")``, a bare ``abc`` is ``(None, "abc")``."""
    parts = (header or "").split(None, 1)
    if not parts:
        return None, None
    if len(parts) == 1:
        return None, parts[0]
    scheme, token = parts[0], parts[1].strip()
    # The scheme is case-insensitive; kopf and the API server's logs show it as written.
    return ("Bearer" if scheme.lower() == "bearer" else scheme), token


def _terminating(e: kube_exceptions.ApiException) -> bool:
    """Whether a 403 is kube-apiserver's refusal of a create in a namespace being deleted:
    its cause ``NamespaceTerminating``, or its message where no cause is given."""
    try:
        body = json.loads(e.body or "{}")
        causes = (body.get("details") or {}).get("causes") or []
        message = str(body.get("message") or "")
    except (ValueError, AttributeError):
        return False
    return any(
        isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes
    ) or message.endswith("because it is being terminated")


def _reason(e: kube_exceptions.ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
        return str(body.get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


class KubeClient:
    """The sync client behind an async door, with its request and write counts; the reads
    (`kubereads`) and writes (`kubeapi`) are built on it."""

    def __init__(self, configuration: kubernetes.client.Configuration) -> None:
        if configuration.retries is None:
            configuration.retries = kuberetries.client_retries()
        self._configuration = configuration
        self._client = kubernetes.client.ApiClient(configuration)
        self._core = kubernetes.client.CoreV1Api(self._client)
        self._custom = kubernetes.client.CustomObjectsApi(self._client)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=WORKERS + RESERVED, thread_name_prefix="kubeapi"
        )
        #: the threads, by namespace: one that hangs leaves the others theirs (module doc)
        self._turns = callgates.FairGate(WORKERS + RESERVED, reserved=RESERVED)
        #: API writes by kind, counted for metrics and for the steady-state benchmark.
        self.writes: dict[str, int] = {}
        #: every request made (reads and writes), for the benchmark's requests per cycle
        self.requests = 0
        #: the LISTs among them, for the benchmark's cost of a re-list
        self.lists = 0

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> Self:
        """In-cluster when there is a ServiceAccount token, else the kubeconfig (or $KUBECONFIG)."""
        configuration = kubernetes.client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            # The path is passed explicitly: the client reads $KUBECONFIG only at import.
            located = path or kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION
            if not any(os.path.exists(os.path.expanduser(p)) for p in located.split(os.pathsep)):
                # The client's words for it: "Invalid kube-config file. No configuration found."
                raise errors.ConfigurationError(
                    f"cannot load the kubeconfig {path or '~/.kube/config'}: there is no such "
                    "file: point --kubeconfig or KUBECONFIG at one (`ehb local up` writes "
                    ".ehb/kubeconfig)"
                )
            try:
                kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=path, client_configuration=configuration
                )
            except kubernetes.config.ConfigException as e:
                raise errors.ConfigurationError(
                    f"cannot load the kubeconfig {path or '~/.kube/config'}: {e}"
                ) from e
            except OSError as e:
                # The client's words were Python's: "[Errno 21] Is a directory: '/x'".
                problem = (
                    "it is a directory"
                    if isinstance(e, IsADirectoryError)
                    else f"it cannot be read ({e.strerror or e})"
                )
                raise errors.ConfigurationError(
                    f"cannot load the kubeconfig {path or '~/.kube/config'}: {problem}: point "
                    "--kubeconfig or KUBECONFIG at a kubeconfig file"
                ) from e
            except (TypeError, KeyError, AttributeError, ValueError, RecursionError) as e:
                # The client indexes the YAML as it expects it: a file of another shape
                # (`clusters: 5`), or not UTF-8, fails inside it with a Python error.
                raise errors.ConfigurationError(
                    f"cannot load the kubeconfig {path or '~/.kube/config'}: it is not shaped "
                    f"as a kubeconfig ({type(e).__name__}: {e}); check its clusters, contexts "
                    "and users against `kubectl config view`, or point --kubeconfig / "
                    "KUBECONFIG at another"
                ) from e
        return cls(configuration)

    @property
    def configuration(self) -> kubernetes.client.Configuration:
        """How this client reaches the API server (another client of the same identity)."""
        return self._configuration

    def connection_info(self) -> ConnectionInfo:
        """How kopf reaches the API server, asked afresh at each of its logins (at start, and
        after a 401).

        The token is taken through the client's refresh hook, as the client's own requests take
        it: in a pod, the ServiceAccount token the kubelet rotates in its file is read again (at
        most once a minute), and an exec plugin's expired token is renewed. The header's scheme
        is split off: in a pod the client holds ``bearer <token>`` in lower case, and the whole
        header taken for the token was sent as ``Bearer bearer <token>``, refused with 401.
        """
        c = self._configuration
        header = c.get_api_key_with_prefix("BearerToken") or c.get_api_key_with_prefix(
            "authorization"
        )
        scheme, token = _authorization(header)
        return ConnectionInfo(
            server=c.host,
            ca_path=c.ssl_ca_cert,
            insecure=not c.verify_ssl,
            scheme=scheme,
            token=token,
            certificate_path=c.cert_file,
            private_key_path=c.key_file,
        )

    async def check_reachable(self) -> None:
        """``GET /api``, the request kopf starts with: an API server that does not answer is
        one error at once, rather than kopf's minute of retries ending in tracebacks."""
        core = kubernetes.client.CoreApi(self._client)
        await self._call("the Kubernetes API", core.get_api_versions)

    async def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves the resource ``plural`` of ``group/version``
        (discovery, as kopf reads it: a custom resource's CRD is installed)."""
        custom = kubernetes.client.CustomObjectsApi(self._client)
        try:
            found = await self._call(
                f"the API group {group}/{version}",
                custom.get_api_resources,
                group=group,
                version=version,
            )
        except errors.NotFound:
            return False
        return any(r.get("name") == plural for r in found.get("resources") or ())

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._client.close()  # type: ignore[no-untyped-call]

    async def _call(self, what: str, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        call = functools.partial(read_body, fn, _preload_content=False, **kwargs)
        self.requests += 1
        loop = asyncio.get_running_loop()
        try:
            # A call waits for its namespace's turn here, not in the executor's one queue.
            async with self._turns.turn(kwargs.get("namespace")):
                raw = await loop.run_in_executor(self._executor, call)
        except (kube_exceptions.ApiException, urllib3.exceptions.HTTPError, OSError) as e:
            raise _wrap(e, what) from e
        return json.loads(raw) if raw else {}

    def _count(self, kind: str) -> None:
        self.writes[kind] = self.writes.get(kind, 0) + 1
