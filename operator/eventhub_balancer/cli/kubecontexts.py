"""The namespace a command works in when ``-n`` is not given: the kubeconfig context's, as
kubectl does.

A platform engineer switches namespaces with ``kubectl config set-context --current
--namespace shop`` (or kubens) and expects every tool to follow; defaulting to ``default``
or to every namespace shows the wrong consumers. Commands call :func:`default_namespace`
with their ``--kubeconfig`` and take its answer when ``-n`` is absent. Inside a pod (no
kubeconfig, ``KUBERNETES_SERVICE_HOST`` set) it is the pod's own namespace, as kubectl's.

Only the kubeconfig's ``current-context``, ``contexts`` and their ``namespace`` are read
here; the API client loads the rest (clusters, users) itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import yaml

from eventhub_balancer import errors

#: kubectl's answer when the context names no namespace.
FALLBACK_NAMESPACE: Final = "default"
#: Where a pod's ServiceAccount namespace is mounted.
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def kubeconfig_paths(kubeconfig: str | None, env: Mapping[str, str]) -> list[Path]:
    """The files kubectl would read: the flag, else $KUBECONFIG's list, else ~/.kube/config."""
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return [Path(p).expanduser() for p in listed]
    return [Path(env.get("HOME", "~")).expanduser() / ".kube" / "config"]


def _load(path: Path, *, flag: str) -> Mapping[str, object]:
    elsewhere = "point --kubeconfig / KUBECONFIG at another"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise errors.InvalidInput(
            flag,
            f"{path} is not UTF-8 text, as kubectl writes it: save it as UTF-8, or {elsewhere}",
        ) from None
    except OSError as e:
        raise errors.InvalidInput(
            flag, f"{path} cannot be read ({e.strerror}): {elsewhere}"
        ) from None
    try:
        loaded = yaml.safe_load(text)
    except RecursionError:  # the parser recurses once per level of nesting
        raise errors.InvalidInput(
            flag, f"{path} is nested too deeply to be a kubeconfig: {elsewhere}"
        ) from None
    except yaml.YAMLError as e:
        raise not_yaml(path, e, flag=flag) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, Mapping):
        raise errors.InvalidInput(
            flag, f"{path} is not a kubeconfig (a YAML mapping with contexts and clusters)"
        )
    return loaded


def not_yaml(path: Path, error: yaml.YAMLError, *, flag: str) -> errors.InvalidInput:
    """A kubeconfig the YAML parser refused, where, and what to do: one line naming ``flag``
    (``--kubeconfig`` or ``KUBECONFIG``), whether this module or the API client read it."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return errors.InvalidInput(
            flag,
            f"{path} is not valid YAML ({where}{error.problem}): fix the file, or point "
            "--kubeconfig / KUBECONFIG at another",
        )
    return errors.InvalidInput(flag, f"{path} is not valid YAML ({error})")


def kubeconfig_of(
    error: yaml.YAMLError, kubeconfig: str | None, env: Mapping[str, str] = os.environ
) -> errors.InvalidInput | None:
    """`not_yaml` when the file ``error`` is about is the kubeconfig a command reads (the API
    client's loader names it in the error's mark), else None."""
    mark = getattr(error, "problem_mark", None)
    if mark is None or not mark.name:
        return None
    failed = Path(mark.name).expanduser().resolve()
    for path in kubeconfig_paths(kubeconfig, env):
        if path.resolve() == failed:
            return not_yaml(path, error, flag="--kubeconfig" if kubeconfig else "KUBECONFIG")
    return None


def find_context(config: Mapping[str, object], *, name: str) -> Mapping[str, object] | None:
    """The ``context`` of the entry called ``name`` in one kubeconfig, when it has one."""
    contexts = config.get("contexts")
    for entry in contexts if isinstance(contexts, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            context = entry.get("context")
            return context if isinstance(context, Mapping) else {}
    return None


def default_namespace(
    kubeconfig: str | None,
    env: Mapping[str, str] = os.environ,
    *,
    service_account_namespace: Path = SERVICE_ACCOUNT_NAMESPACE,
) -> str:
    """The namespace ``-n`` means when it is not given."""
    if not kubeconfig and not env.get("KUBECONFIG") and env.get("KUBERNETES_SERVICE_HOST"):
        try:
            return service_account_namespace.read_text().strip() or FALLBACK_NAMESPACE
        except OSError:
            return FALLBACK_NAMESPACE
    flag = "--kubeconfig" if kubeconfig else "KUBECONFIG"
    configs = [_load(p, flag=flag) for p in kubeconfig_paths(kubeconfig, env) if p.is_file()]
    # kubectl merges the files: the first current-context wins, and the first context of
    # that name.
    current = next((str(c["current-context"]) for c in configs if c.get("current-context")), "")
    if not current:
        return FALLBACK_NAMESPACE
    for config in configs:
        context = find_context(config, name=current)
        if context is not None:
            return str(context.get("namespace") or FALLBACK_NAMESPACE)
    return FALLBACK_NAMESPACE


def namespace_of(*, namespace: str | None, kubeconfig: str | None) -> str:
    """``-n`` when it was given, else the context's (`default_namespace`): what each command
    that names one EventHubConsumer calls with its ``--namespace`` and ``--kubeconfig``."""
    return namespace or default_namespace(kubeconfig)
