"""Kubeconfig files that point kopf, the kubernetes client and kubectl at the local server.

Plain HTTP with a dummy bearer token: the server takes any token that is not a pod identity
for its administrator, and a token (rather than no user at all) keeps clients on the same code
path as with a real cluster. ``user=identities.kubeconfig_user(...)`` writes one for a pod's
service-account identity instead, which admission policies see as that pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

#: The name of the cluster, user and context in the written kubeconfig.
CONTEXT = "ehb-local"

#: Any token works; this one says where it came from when it shows up in logs.
DUMMY_TOKEN = "ehb-local-dummy-token"


def build(
    *, server: str, namespace: str = "default", user: Mapping[str, object] | None = None
) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server}}],
        "users": [
            {"name": CONTEXT, "user": dict(user) if user is not None else {"token": DUMMY_TOKEN}}
        ],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write(
    path: Path,
    *,
    server: str,
    namespace: str = "default",
    user: Mapping[str, object] | None = None,
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(build(server=server, namespace=namespace, user=user), sort_keys=False)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)  # as kubectl writes them, even though the token is a dummy
    return path
