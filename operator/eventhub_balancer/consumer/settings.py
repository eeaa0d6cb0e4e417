"""The consumer's configuration: flags first, then the pod's environment.

Kubernetes hands a pod its identity through the Downward API (``POD_NAME``,
``POD_NAMESPACE``, ``POD_UID``: the owner id carries the uid) and its secrets through Secrets,
as files (``*_FILE``: read again when the kubelet updates them, `secretfiles`) or as env (read
once); flags are for everything a user tunes. A missing pod name is the most common
mistake, so its message shows the YAML.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from eventhub_balancer import errors
from eventhub_balancer.consumer import (
    connections,
    crashmarkers,
    partitions,
    processing,
    secretfiles,
    triggers,
)
from eventhub_balancer.contracts import connectionstrings, endpoints

logger = logging.getLogger(__name__)

ENV_POD_NAME = "POD_NAME"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
ENV_POD_UID = "POD_UID"
#: Comma-separated DNS suffixes the pod's credentials may go to (default: the public cloud's).
ENV_ALLOWED_EVENTHUB_SUFFIXES = endpoints.ENV_ALLOWED_EVENTHUB_SUFFIXES
ENV_ALLOWED_BLOB_SUFFIXES = endpoints.ENV_ALLOWED_BLOB_SUFFIXES
#: "true": the local emulators on loopback are allowed too (the local stack only).
ENV_ALLOW_DEVELOPMENT_ENDPOINTS = "EHB_ALLOW_DEVELOPMENT_ENDPOINTS"
ENV_CONSUMER = "EHB_CONSUMER"
ENV_EVENTHUB_CONNECTION_STRING = connectionstrings.ENV_EVENTHUB_CONNECTION_STRING
ENV_BLOB_CONNECTION_STRING = connectionstrings.ENV_BLOB_CONNECTION_STRING
#: The forms that name a file holding the string (a mounted Secret's key).
FILE_SUFFIX = "_FILE"
ENV_SPARK_MASTER = "EHB_SPARK_MASTER"
ENV_SPARK_REMOTE = "EHB_SPARK_REMOTE"

DOWNWARD_API_SNIPPET = """\
add the pod's name (and namespace) to the consumer container with the Downward API:

        env:
          - name: POD_NAME
            valueFrom:
              fieldRef: {fieldPath: metadata.name}
          - name: POD_NAMESPACE
            valueFrom:
              fieldRef: {fieldPath: metadata.namespace}
          - name: POD_UID
            valueFrom:
              fieldRef: {fieldPath: metadata.uid}
"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConsumerSettings:
    """Everything ``ehb consume`` runs with (secrets hidden from ``repr``)."""

    pod: str
    namespace: str
    consumer: str
    handler: str
    handler_path: tuple[str, ...] = ()
    spark: bool = False
    spark_master: str | None = None
    #: A Spark Connect server (``sc://host:port``) instead of a driver in this process.
    spark_remote: str | None = None
    spark_conf: Mapping[str, str] = dataclasses.field(default_factory=dict)
    trigger: triggers.TriggerSettings = dataclasses.field(default_factory=triggers.TriggerSettings)
    #: Sync handler calls that may run at once (a thread each).
    handler_concurrency: int = processing.DEFAULT_HANDLER_CONCURRENCY
    batch: partitions.BatchSettings = dataclasses.field(default_factory=partitions.BatchSettings)
    shutdown_timeout: float = 25.0
    #: Where each handler call is noted, for a process that dies in the handler to be counted
    #: by the next one (`crashmarkers`; the chart's /tmp is an emptyDir). None: nowhere.
    crash_marker_dir: Path | None = crashmarkers.DEFAULT_DIRECTORY
    host: str = "0.0.0.0"
    port: int = 8080
    assignment_file: Path | None = None
    ack_file: Path | None = None
    kubeconfig: str | None = None
    credentials: connections.Credentials = dataclasses.field(
        default_factory=connections.Credentials
    )

    def __post_init__(self) -> None:
        # Without --spark the handler takes events, not a DataFrame: a Spark setting would be
        # ignored, and the user would believe the work runs on their cluster.
        for flag, env, value in (
            ("--spark-remote", ENV_SPARK_REMOTE, self.spark_remote),
            ("--spark-master", ENV_SPARK_MASTER, self.spark_master),
            ("--spark-conf", None, dict(self.spark_conf)),
        ):
            if value and not self.spark:
                given = f"{flag} or env {env}" if env else flag
                raise errors.InvalidInput(
                    flag,
                    f"only goes with --spark: add --spark (the handler then takes a DataFrame) "
                    f"or drop {given}",
                )
        if self.spark_master and self.spark_remote:
            raise errors.InvalidInput(
                "--spark-remote",
                "goes without --spark-master (a Connect server has its own master); "
                f"give one of them (env {ENV_SPARK_MASTER} / {ENV_SPARK_REMOTE})",
            )
        # A mistyped URL fails here, before anything connects, not in the session's thread.
        from eventhub_balancer.spark import flags

        if self.spark_master:
            flags.validate_master(self.spark_master)
        if self.spark_remote:
            flags.parse_remote(self.spark_remote)
        if self.handler_concurrency < 1:
            raise errors.InvalidInput(
                "--handler-concurrency", f"{self.handler_concurrency} is less than 1"
            )


def pod_identity(
    env: Mapping[str, str],
    *,
    pod: str | None,
    namespace: str | None,
    need_namespace: bool,
    consumer: str | None = None,
    need_consumer: bool = False,
) -> tuple[str, str]:
    """The pod's name and namespace from flags or the Downward API environment. Every one
    missing (with the consumer's name, when ``need_consumer``) is told in one error, so that a
    container set up by hand is mended in one go, not one variable a start."""
    name = pod or env.get(ENV_POD_NAME, "").strip()
    where = namespace or env.get(ENV_POD_NAMESPACE, "").strip()
    missing = [ENV_POD_NAME] if not name else []
    if not where and need_namespace:
        missing.append(ENV_POD_NAMESPACE)
    fixes = [DOWNWARD_API_SNIPPET] if missing else []
    if need_consumer and not consumer:
        missing.append(ENV_CONSUMER)
        fixes.insert(0, f"give the EventHubConsumer's name (--consumer or env {ENV_CONSUMER})")
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise errors.InvalidInput(", ".join(missing), f"{verb} not set: {'; '.join(fixes)}")
    return name, where or "default"


def endpoint_policy(
    env: Mapping[str, str],
    *,
    eventhub_suffixes: list[str] | None = None,
    blob_suffixes: list[str] | None = None,
    allow_development: bool | None = None,
) -> endpoints.EndpointPolicy:
    """Where the pod's credentials may go: flags first, then the environment, then the public
    cloud's suffixes with no development endpoint."""
    eventhub, blob = endpoints.configured_suffixes(eventhub_suffixes, blob_suffixes, env)
    development = allow_development
    if development is None:
        development = env.get(ENV_ALLOW_DEVELOPMENT_ENDPOINTS, "").strip().lower() == "true"
    return endpoints.EndpointPolicy(
        eventhub_suffixes=eventhub,
        blob_suffixes=blob,
        allow_development=development,
        setting=f"--allowed-eventhub-suffix / --allowed-blob-suffix of ehb consume, or env "
        f"{ENV_ALLOWED_EVENTHUB_SUFFIXES} / {ENV_ALLOWED_BLOB_SUFFIXES}",
    )


#: What an Event Hubs connection string looks like (the portal's "Shared access policies").
EVENTHUB_CONNECTION_STRING_SHAPE = (
    "Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
    "SharedAccessKey=<key>"
)


def check_eventhub_connection_string(
    connection_string: str, *, policy: endpoints.EndpointPolicy, field: str
) -> None:
    """Refuse a connection string that can never work, at start and in one line.

    A malformed string is a configuration error, not an outage: left to the receive loop, it
    fails the same way on every retry. Only key names are quoted, never values (secrets).
    """
    fields = endpoints.connection_string_fields(connection_string, field=field)
    development = fields.get("usedevelopmentemulator") == "true"
    if "endpoint" not in fields:
        raise errors.InvalidInput(
            field, f"has no Endpoint; give {EVENTHUB_CONNECTION_STRING_SHAPE}"
        )
    if not development and not fields["endpoint"].lower().startswith("sb://"):
        raise errors.InvalidInput(
            field,
            f"its Endpoint is not an sb:// URL; give {EVENTHUB_CONNECTION_STRING_SHAPE}",
        )
    signed = "sharedaccesssignature" in fields
    keyed = {"sharedaccesskeyname", "sharedaccesskey"} <= fields.keys()
    if not (signed or keyed):
        raise errors.InvalidInput(
            field,
            "has no SharedAccessKeyName and SharedAccessKey (nor a SharedAccessSignature); "
            f"give {EVENTHUB_CONNECTION_STRING_SHAPE}",
        )
    # The host must be allowed: the same check the receiver makes later, made once, now.
    policy.check_eventhub(fully_qualified_namespace="", connection_string=connection_string)


def credentials_from(
    env: Mapping[str, str] = os.environ, *, policy: endpoints.EndpointPolicy | None = None
) -> connections.Credentials:
    """The secrets, the endpoint policy (strict unless configured) and the pod's uid.

    The connection strings are checked here, before anything connects: a string that cannot
    work fails the pod at start with what to change, instead of a retry loop. Each comes from
    its variable or from the file its ``_FILE`` form names, never both."""
    policy = policy if policy is not None else endpoint_policy(env)

    def check_eventhub(value: str, field: str) -> None:
        check_eventhub_connection_string(value, policy=policy, field=field)

    def check_blob(value: str, field: str) -> None:
        policy.check_blob(account_url=None, connection_string=value)

    eventhub, eventhub_file = _secret(env, ENV_EVENTHUB_CONNECTION_STRING, check_eventhub)
    blob, blob_file = _secret(env, ENV_BLOB_CONNECTION_STRING, check_blob)
    # Said once, at start: an empty variable (a chart's "" for unset) means workload identity,
    # and a user who meant to give a string would otherwise learn it only from a refused token.
    logger.info(
        "credentials: Event Hubs by %s; checkpoint store by %s",
        _source(env, ENV_EVENTHUB_CONNECTION_STRING, eventhub, eventhub_file),
        _source(env, ENV_BLOB_CONNECTION_STRING, blob, blob_file),
    )
    return connections.Credentials(
        eventhub_connection_string=eventhub,
        blob_connection_string=blob,
        endpoint_policy=policy,
        pod_uid=env.get(ENV_POD_UID, "").strip(),
        files=secretfiles.SecretFiles(eventhub=eventhub_file, blob=blob_file),
    )


def _secret(
    env: Mapping[str, str], name: str, check: secretfiles.Check
) -> tuple[str | None, secretfiles.SecretFile | None]:
    """The value of ``name``, or the file of ``name``_FILE (its value checked as well)."""
    value = env.get(name) or None
    path = env.get(name + FILE_SUFFIX, "").strip()
    if value is not None and path:
        raise errors.InvalidInput(
            name + FILE_SUFFIX,
            f"goes without {name}, which is set too: keep one of them ({name + FILE_SUFFIX} "
            "is read again when the file changes, a key rotation needs no restart)",
        )
    if path:
        file = secretfiles.SecretFile(Path(path), setting=name + FILE_SUFFIX, check=check)
        return file.value, file
    if value is not None:
        check(value, name)
    return value, None


def _source(
    env: Mapping[str, str], name: str, value: str | None, file: secretfiles.SecretFile | None
) -> str:
    """Where a secret came from, in words (never its value)."""
    if file is not None:
        return f"the connection string in the file of {file.field}"
    if value is not None:
        return f"the connection string of {name}"
    empty = [n for n in (name, name + FILE_SUFFIX) if n in env and not env[n].strip()]
    if not empty:
        return "workload identity"
    verb = "is" if len(empty) == 1 else "are"
    return f"workload identity ({' and '.join(empty)} {verb} set but empty, which counts as unset)"
