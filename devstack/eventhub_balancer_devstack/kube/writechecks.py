"""What a write must pass before the store keeps it, for `serving`: strict field validation
(checked on the request) and the ValidatingAdmissionPolicies of its user (run by the store).
"""

from __future__ import annotations

from typing import Any

from eventhub_balancer_devstack.kube import (
    admitting,
    builtinfields,
    failures,
    identities,
    policies,
    resources,
    schemas,
    storage,
)
from eventhub_balancer_devstack.kube import selectors as selecting


def _unknown(spec: resources.ResourceSpec, body: Any) -> str:
    """The fields of ``body`` its kind lacks, as a strict decoding error lists them."""
    if spec.schema is not None:
        unknown = schemas.unknown_fields(body, spec.schema)
    else:
        unknown = builtinfields.unknown(spec, body)
    return ", ".join(f'unknown field "{path}"' for path in unknown)


def check_field_validation(request: Any, spec: resources.ResourceSpec) -> None:
    """``fieldValidation=Strict`` (kubectl's default): a field the schema lacks in a created or
    replaced object is a 400 (a patch is checked once applied: `check_patched_fields`)."""
    if request.params.get("fieldValidation") != "Strict" or request.method == "PATCH":
        return
    if unknown := _unknown(spec, request.data):
        raise failures.bad_request(
            f'{spec.kind} in version "{spec.version}" cannot be handled as a {spec.kind}: '
            f"strict decoding error: {unknown}"
        )


def check_patched_fields(
    request: Any,
    store: storage.Store,
    spec: resources.ResourceSpec,
    *,
    namespace: str | None,
    name: str,
    patch_type: admitting.PatchType,
) -> None:
    """``fieldValidation=Strict`` on a patch (``kubectl apply`` over an existing object): a
    real server decodes the patched object, so a field its kind lacks is a 422 naming
    ``patch``, for a JSON patch too."""
    if request.params.get("fieldValidation") != "Strict":
        return
    current = store.get(spec, namespace=namespace, name=name)
    patched = admitting.apply_patch(spec, current, request.data, patch_type, name=name)
    if unknown := _unknown(spec, patched):
        raise failures.invalid_patch(patched, unknown)


def check_type_meta(request: Any, spec: resources.ResourceSpec, body: Any) -> None:
    """A custom resource's body names its ``kind`` and ``apiVersion``: without a Go type to
    decode it into, a real server cannot tell what it is (400); built-in kinds may omit them."""
    if not spec.custom or not isinstance(body, dict):
        return
    for field, shown in (("kind", "Kind"), ("apiVersion", "apiVersion")):
        if not body.get(field):
            raise failures.bad_request(
                f"the object provided is unrecognized (must be of type {spec.kind}): "
                f"Object '{shown}' is missing in '{request.text}'"
            )


def check_patch_shape(request: Any, patch_type: admitting.PatchType) -> None:
    """A JSON patch is a list of operations; anything else is a 400, worded as the real server
    words it for the ``fieldValidation`` asked (``Warn`` when none is)."""
    if patch_type != "json" or isinstance(request.data, list):
        return
    kind = admitting.json_kind(request.data)
    if request.params.get("fieldValidation") == "Ignore":
        raise failures.bad_request(
            f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch"
        )
    raise failures.bad_request(
        f"error decoding patch: json: cannot unmarshal {kind} into Go value of type "
        "[]handlers.jsonPatchOp"
    )


def admission(
    store: storage.Store,
    request: Any,
    spec: resources.ResourceSpec,
    namespace: str | None,
    name: str | None,
    subresource: str | None,
) -> storage.Admit | None:
    """The ValidatingAdmissionPolicies of this request's user, run by the store on write."""
    raw = request._raw_request
    user = identities.user_of(
        request.headers.get("Authorization"),
        list(raw.headers.items()) if raw is not None else list(request.headers.items()),
    )

    def admit(operation: str, new: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
        bindings = store.select(resources.POLICY_BINDINGS, namespace=None)
        if not bindings:
            return
        body = new if new is not None else old
        meta = (body or {}).get("metadata") or {}
        ns = str(meta.get("namespace") or namespace or "")
        namespace_object = None
        if ns and spec.namespaced:
            found = store.select(
                resources.NAMESPACES,
                namespace=None,
                selector=selecting.parse(labels=None, fields=f"metadata.name={ns}"),
            )
            namespace_object = found[0] if found else None
        attrs = policies.Attributes(
            spec=spec,
            operation=operation,  # type: ignore[arg-type]
            name=str(meta.get("name") or name or ""),
            namespace=ns,
            subresource=subresource,
            new=new,
            old=old,
            user=user,
            namespace_object=namespace_object,
        )
        policies.admit(
            attrs,
            policies=store.select(resources.POLICIES, namespace=None),
            bindings=bindings,
        )

    return admit
