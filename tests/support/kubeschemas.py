"""Strict validation against Kubernetes' API schemas, as `kubernetes_validate.validate` does it,
with each schema file parsed once per process.

`kubernetes_validate.validate` parses the kind's schema and the minor's whole
``_definitions.json`` (1.8 MB) again at every call. The chart tests validate a few hundred
documents over every supported minor, and spent most of their time (two of `make test`'s
minutes, in one process) parsing the same JSON again. Here the parsed files are kept, and
so is each minor's registry of definitions; the rules are the library's: the newest schema
not newer than the version asked for, its strict variant, the same file names, the same
errors (`tests/install/test_kube_schemas.py` checks that both agree).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils
from referencing import Registry, Resource

#: Files kept: each minor's definitions and the kinds the charts render, with room.
KEPT_FILES = 256


@functools.lru_cache(maxsize=KEPT_FILES)
def _contents(filename: str, desired_version: str) -> Any:
    return utils.schema_contents(filename, desired_version)


@functools.lru_cache(maxsize=32)
def _definitions(schema_dir: str, desired_version: str) -> Registry[Any]:
    contents = _contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", desired_version)
    return Resource.from_contents(contents) @ Registry()


@functools.lru_cache(maxsize=1)
def _versions() -> tuple[str, ...]:
    return tuple(utils.all_versions())


def _schema_version(desired_version: str) -> str:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in utils.major_minor(version).split("."))

    desired = utils.major_minor(desired_version)
    older = [v for v in _versions() if key(v) <= key(desired)]
    if key(desired) > key(_versions()[-1]) or not older:
        raise utils.VersionNotSupportedError(version=desired)
    return older[-1]


def validate(body: Mapping[str, Any], desired_version: str) -> str:
    """``body`` validated strictly against Kubernetes ``desired_version`` ("1.34.0" or
    "v1.34"): the minor whose schema was used, else `kubernetes_validate.ValidationError` or
    `kubernetes_validate.SchemaNotFoundError`, as the library raises them."""
    desired_version = desired_version.removeprefix("v")
    version = _schema_version(desired_version)
    # rbac.authorization.k8s.io/v1 -> rbac-v1, as the library names the files.
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", body["apiVersion"])
    schema_dir = f"v{version}-local-strict"
    try:
        schema = _contents(
            f"kubernetes-json-schema/{schema_dir}/{body['kind'].lower()}-{api_version}.json",
            desired_version,
        )
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=utils.major_minor(desired_version),
            kind=body["kind"],
            api_version=body["apiVersion"],
        ) from None
    registry = Resource.from_contents(schema) @ _definitions(schema_dir, desired_version)
    try:
        jsonschema.Draft202012Validator(schema, registry=registry).validate(dict(body))
    except jsonschema.ValidationError as e:
        raise kubernetes_validate.ValidationError(e, version=utils.major_minor(version)) from e
    return utils.major_minor(version)
