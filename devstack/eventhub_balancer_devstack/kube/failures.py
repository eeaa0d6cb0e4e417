"""Kubernetes ``Status`` failures that the local API server answers with.

They are protocol answers (404, 409, 422...), not errors of this project: clients such as kopf
and the kubernetes client decide what to do from ``code`` and ``reason``, so the bodies follow
the shape of the real API server's ``metav1.Status``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


class APIFailure(Exception):
    """A request the API server refuses; rendered as a ``kind: Status`` body."""

    def __init__(
        self,
        *,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        plain_text: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        #: Answered as plain text, not a Status: a path outside every served group version.
        self.plain_text = plain_text

    def as_status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def _details(kind: str, name: str | None, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def not_found(*, plural: str, group: str, name: str | None) -> APIFailure:
    what = f"{plural}.{group}" if group else plural
    message = f'{what} "{name}" not found' if name else f"the server could not find {what}"
    return APIFailure(
        code=404, reason="NotFound", message=message, details=_details(plural, name, group)
    )


def no_such_path(path: str) -> APIFailure:
    """A path in a served group version that names no resource (or no subresource of it)."""
    return APIFailure(
        code=404, reason="NotFound", message="the server could not find the requested resource"
    )


def page_not_found(path: str) -> APIFailure:
    """A path outside every served group version: a real server's mux answers in plain text."""
    return APIFailure(code=404, reason="NotFound", message="404 page not found", plain_text=True)


def already_exists(*, plural: str, group: str, name: str) -> APIFailure:
    what = f"{plural}.{group}" if group else plural
    return APIFailure(
        code=409,
        reason="AlreadyExists",
        message=f'{what} "{name}" already exists',
        details=_details(plural, name, group),
    )


def conflict(*, plural: str, group: str, name: str) -> APIFailure:
    what = f"{plural}.{group}" if group else plural
    return APIFailure(
        code=409,
        reason="Conflict",
        message=(
            f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        ),
        details=_details(plural, name, group),
    )


def precondition_failed(
    *, kind: str, group: str, name: str, field: str, wanted: str, stored: str
) -> APIFailure:
    """409 for a delete whose ``preconditions`` (``uid`` or ``resourceVersion``) do not hold;
    the real server names the kind here, not the resource."""
    if field == "uid":
        detail = (
            f"the UID in the precondition ({wanted}) does not match the UID in record ({stored})."
            " The object might have been deleted and then recreated"
        )
    else:
        detail = (
            f"the ResourceVersion in the precondition ({wanted}) does not match the "
            f"ResourceVersion in record ({stored}). The object might have been modified"
        )
    what = f"{kind}.{group}" if group else kind
    return APIFailure(
        code=409,
        reason="Conflict",
        message=f'Operation cannot be fulfilled on {what} "{name}": {detail}',
        details=_details(kind, name, group),
    )


def patch_unprocessable() -> APIFailure:
    """422 for a JSON patch that cannot be applied (a failed ``test``, a missing path): the
    real server keeps the reason to itself and answers with a generic message."""
    return APIFailure(
        code=422,
        reason="Invalid",
        message="the server rejected our request due to an error in our request",
    )


def invalid(*, plural: str, group: str, name: str | None, message: str) -> APIFailure:
    return APIFailure(
        code=422, reason="Invalid", message=message, details=_details(plural, name, group)
    )


def invalid_fields(
    *, kind: str, group: str, name: str | None, causes: list[Any], message: str
) -> APIFailure:
    """422 Invalid naming each field, as the API server refuses an object its schema rejects."""
    details = _details(kind, name, group)
    details["causes"] = causes
    what = f"{kind}.{group}" if group else kind
    return APIFailure(
        code=422,
        reason="Invalid",
        message=f'{what} "{name}" is invalid: {message}',
        details=details,
    )


def version_required(*, plural: str, group: str, name: str) -> APIFailure:
    """422 for an update without ``metadata.resourceVersion`` of a kind that needs one; the
    real server names the resource (``eventhubconsumers.eventhub-balancer.dev``) as its kind."""
    message = "Invalid value: 0: must be specified for an update"
    cause = {"reason": "FieldValueInvalid", "message": message, "field": "metadata.resourceVersion"}
    return invalid_fields(
        kind=plural,
        group=group,
        name=name,
        causes=[cause],
        message=f"metadata.resourceVersion: {message}",
    )


def invalid_patch(patched: Any, unknown: str) -> APIFailure:
    """422 for a patch whose result has fields the kind lacks (``fieldValidation=Strict``): a
    real server names ``patch`` and shows the patched object, without a kind or a name."""
    shown = json.dumps(json.dumps(patched, sort_keys=True, separators=(",", ":")))
    message = f"Invalid value: {shown}: strict decoding error: {unknown}"
    return APIFailure(
        code=422,
        reason="Invalid",
        message=f' "" is invalid: patch: {message}',
        details={"causes": [{"reason": "FieldValueInvalid", "message": message, "field": "patch"}]},
    )


def bad_request(message: str) -> APIFailure:
    return APIFailure(code=400, reason="BadRequest", message=message)


def method_not_allowed(message: str) -> APIFailure:
    return APIFailure(code=405, reason="MethodNotAllowed", message=message)


def unsupported_media_type(accepted: Iterable[str]) -> APIFailure:
    """415, listing the media types this request may use (in the real server's words)."""
    return APIFailure(
        code=415,
        reason="UnsupportedMediaType",
        message="the body of the request was in an unknown format - accepted media types "
        f"include: {', '.join(accepted)}",
    )


def unreadable_protobuf(detail: str) -> APIFailure:
    """415 for a protobuf body of a kind or field the local API does not decode (`protobufs`):
    refused whole, never stored with a part silently missing."""
    return APIFailure(
        code=415,
        reason="UnsupportedMediaType",
        message="the body of the request was in an unknown format - the local API reads "
        f"protobuf for the kinds kubectl creates only, and not {detail}: send it as JSON "
        "(kubectl create -f, or -o json | kubectl apply -f -)",
    )


def expired(message: str) -> APIFailure:
    return APIFailure(code=410, reason="Expired", message=message)
