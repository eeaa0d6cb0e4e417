"""kubectl's protobuf bodies, decoded for the built-in kinds its ``create`` commands make.

kubectl's typed clients send built-in objects as ``application/vnd.kubernetes.protobuf``
(``kubectl create secret generic``, ``create namespace``, ``create configmap``, ``create
deployment``, ``create serviceaccount``, ``create role``, ``create rolebinding``, ``create
token``), and client-go falls back to JSON after a 415 for CBOR only,
never for protobuf: a server that cannot read these bodies fails the commands that
docs/first-consumer.md tells users to run. So the local API reads them: the envelope is
``k8s\\x00`` and a ``runtime.Unknown`` (its type, then the object's own protobuf), and the
objects are decoded by the field numbers of k8s.io/api's generated.proto into the JSON a
client would have sent.

Only the messages those commands fill are known. Go's protobuf encoder writes every field
that is not a nil pointer, so a body is full of empty strings, zeros and empty messages:
those are what JSON's ``omitempty`` leaves out, and are dropped, known or not. A field this
table does not know that carries a value is refused (415), never silently lost. Pure.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Literal

#: The media type and the four bytes every Kubernetes protobuf body starts with.
CONTENT_TYPE: Final = "application/vnd.kubernetes.protobuf"
MAGIC: Final = b"k8s\x00"

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5

Kind = Literal["string", "bytes", "int", "bool", "message", "intorstring"]


class ProtobufError(ValueError):
    """A body that is not a Kubernetes protobuf envelope (the server answers 400)."""


class Unreadable(ProtobufError):
    """A well-formed body of a kind or field this decoder does not know (415)."""


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a message: its JSON name and how its value is encoded."""

    name: str
    kind: Kind = "string"
    #: The message type of a ``message`` field, or of a map's values.
    message: str = ""
    repeated: bool = False
    #: A map (``map<string, V>``: entries with a key 1 and a value 2); ``kind`` is V's.
    mapping: bool = False
    #: A Go pointer: present means set, so a zero is kept (``replicas: 0``).
    pointer: bool = False


def _s(name: str, **kw: Any) -> Field:
    return Field(name, "string", **kw)


def _m(name: str, message: str, **kw: Any) -> Field:
    return Field(name, "message", message, **kw)


def _strings(name: str) -> Field:
    return Field(name, "string", mapping=True)


#: Fields the server sets itself, read from no client: skipped whatever they hold.
_SERVER_SET: Final = frozenset({4, 5, 6, 7, 8, 9, 10, 17})

#: The messages, by the field numbers of k8s.io/api and apimachinery's generated.proto.
MESSAGES: Final[Mapping[str, Mapping[int, Field]]] = {
    "ObjectMeta": {
        1: _s("name"), 2: _s("generateName"), 3: _s("namespace"),
        11: _strings("labels"), 12: _strings("annotations"),
        13: _m("ownerReferences", "OwnerReference", repeated=True),
        14: _s("finalizers", repeated=True),
    },
    "OwnerReference": {
        5: _s("apiVersion"), 1: _s("kind"), 3: _s("name"), 4: _s("uid"),
        6: Field("controller", "bool", pointer=True),
        7: Field("blockOwnerDeletion", "bool", pointer=True),
    },
    "Secret": {
        1: _m("metadata", "ObjectMeta"), 2: Field("data", "bytes", mapping=True),
        3: _s("type"), 4: _strings("stringData"), 5: Field("immutable", "bool", pointer=True),
    },
    "ConfigMap": {
        1: _m("metadata", "ObjectMeta"), 2: _strings("data"),
        3: Field("binaryData", "bytes", mapping=True),
        4: Field("immutable", "bool", pointer=True),
    },
    "Namespace": {
        1: _m("metadata", "ObjectMeta"), 2: _m("spec", "NamespaceSpec"),
        3: _m("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: _s("finalizers", repeated=True)},
    "NamespaceStatus": {1: _s("phase")},
    "Deployment": {
        1: _m("metadata", "ObjectMeta"), 2: _m("spec", "DeploymentSpec"),
        3: _m("status", "Ignored"),  # a status is the server's to write
    },
    "DeploymentSpec": {
        1: Field("replicas", "int", pointer=True), 2: _m("selector", "LabelSelector"),
        3: _m("template", "PodTemplateSpec"), 4: _m("strategy", "DeploymentStrategy"),
        5: Field("minReadySeconds", "int"), 6: Field("revisionHistoryLimit", "int", pointer=True),
        7: Field("paused", "bool"), 9: Field("progressDeadlineSeconds", "int", pointer=True),
    },
    "DeploymentStrategy": {1: _s("type"), 2: _m("rollingUpdate", "RollingUpdateDeployment")},
    "RollingUpdateDeployment": {
        1: Field("maxUnavailable", "intorstring"), 2: Field("maxSurge", "intorstring"),
    },
    "LabelSelector": {
        1: _strings("matchLabels"),
        2: _m("matchExpressions", "LabelSelectorRequirement", repeated=True),
    },
    "LabelSelectorRequirement": {1: _s("key"), 2: _s("operator"), 3: _s("values", repeated=True)},
    "PodTemplateSpec": {1: _m("metadata", "ObjectMeta"), 2: _m("spec", "PodSpec")},
    "PodSpec": {
        2: _m("containers", "Container", repeated=True),
        20: _m("initContainers", "Container", repeated=True),
        3: _s("restartPolicy"), 4: Field("terminationGracePeriodSeconds", "int", pointer=True),
        5: Field("activeDeadlineSeconds", "int", pointer=True), 6: _s("dnsPolicy"),
        7: _strings("nodeSelector"), 8: _s("serviceAccountName"), 9: _s("serviceAccount"),
        10: _s("nodeName"), 11: Field("hostNetwork", "bool"), 12: Field("hostPID", "bool"),
        13: Field("hostIPC", "bool"), 16: _s("hostname"), 17: _s("subdomain"),
        19: _s("schedulerName"), 24: _s("priorityClassName"),
        21: Field("automountServiceAccountToken", "bool", pointer=True),
        30: Field("enableServiceLinks", "bool", pointer=True),
    },
    "Container": {
        1: _s("name"), 2: _s("image"), 3: _s("command", repeated=True),
        4: _s("args", repeated=True), 5: _s("workingDir"),
        6: _m("ports", "ContainerPort", repeated=True), 7: _m("env", "EnvVar", repeated=True),
        13: _s("terminationMessagePath"), 14: _s("imagePullPolicy"), 16: Field("stdin", "bool"),
        17: Field("stdinOnce", "bool"), 18: Field("tty", "bool"),
        20: _s("terminationMessagePolicy"),
    },
    "ContainerPort": {
        1: _s("name"), 2: Field("hostPort", "int"), 3: Field("containerPort", "int"),
        4: _s("protocol"), 5: _s("hostIP"),
    },
    "EnvVar": {1: _s("name"), 2: _s("value")},
    "TokenRequest": {
        1: _m("metadata", "ObjectMeta"), 2: _m("spec", "TokenRequestSpec"),
        3: _m("status", "Ignored"),
    },
    "TokenRequestSpec": {
        1: _s("audiences", repeated=True), 4: Field("expirationSeconds", "int", pointer=True),
        3: _m("boundObjectRef", "BoundObjectReference"),
    },
    "BoundObjectReference": {1: _s("kind"), 2: _s("apiVersion"), 3: _s("name"), 4: _s("uid")},
    "ServiceAccount": {
        1: _m("metadata", "ObjectMeta"),
        4: Field("automountServiceAccountToken", "bool", pointer=True),
    },
    "Role": {1: _m("metadata", "ObjectMeta"), 2: _m("rules", "PolicyRule", repeated=True)},
    "PolicyRule": {
        1: _s("verbs", repeated=True), 2: _s("apiGroups", repeated=True),
        3: _s("resources", repeated=True), 4: _s("resourceNames", repeated=True),
        5: _s("nonResourceURLs", repeated=True),
    },
    "RoleBinding": {
        1: _m("metadata", "ObjectMeta"), 2: _m("subjects", "Subject", repeated=True),
        3: _m("roleRef", "RoleRef"),
    },
    "Subject": {1: _s("kind"), 2: _s("apiGroup"), 3: _s("name"), 4: _s("namespace")},
    "RoleRef": {1: _s("apiGroup"), 2: _s("kind"), 3: _s("name")},
    "Ignored": {},
}  # fmt: skip

#: The kinds a protobuf body may hold here: (apiVersion, kind) -> its message.
KINDS: Final[Mapping[tuple[str, str], str]] = {
    ("v1", "Secret"): "Secret",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Namespace"): "Namespace",
    ("apps/v1", "Deployment"): "Deployment",
    ("authentication.k8s.io/v1", "TokenRequest"): "TokenRequest",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("rbac.authorization.k8s.io/v1", "Role"): "Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(10):  # a varint is at most ten bytes
        if at >= len(data):
            raise ProtobufError("the body ends inside a number")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at
    raise ProtobufError("a number of more than ten bytes")


def _entries(data: bytes) -> list[tuple[int, int, Any]]:
    """The (field number, wire type, raw value) of each field of one message, in order."""
    entries, at = [], 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _BYTES:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ProtobufError("the body ends inside a field")
            value, at = data[at : at + size], at + size
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            value, at = data[at : at + size], at + size
        else:
            raise ProtobufError(f"wire type {wire} of field {number}")
        if not number:
            raise ProtobufError("a field numbered 0")
        entries.append((number, wire, value))
    return entries


def _zero(wire: int, value: Any) -> bool:
    """An empty string or message, a zero: what JSON would have left out."""
    if wire == _VARINT:
        return bool(value == 0)
    if wire in (_FIXED64, _FIXED32):
        return not any(value)
    if not value:
        return True
    try:
        return all(_zero(w, v) for _, w, v in _entries(value))
    except ProtobufError:
        return False  # text, not a message


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(field: Field, wire: int, value: Any, where: str) -> Any:
    expected = _VARINT if field.kind in ("int", "bool") else _BYTES
    if wire != expected:
        raise ProtobufError(f"{where}: wire type {wire}, not {expected}")
    if field.kind == "int":
        return _signed(value)
    if field.kind == "bool":
        return bool(value)
    if field.kind == "bytes":
        return base64.b64encode(value).decode()
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtobufError(f"{where}: not UTF-8 text") from e


def _int_or_string(data: bytes) -> int | str:
    fields = {number: value for number, _, value in _entries(data)}
    if fields.get(1, 0) == 0:
        return _signed(int(fields.get(2, 0)))
    return bytes(fields.get(3, b"")).decode("utf-8")


def _map_entry(field: Field, data: bytes, where: str) -> tuple[str, Any]:
    fields = {number: (wire, value) for number, wire, value in _entries(data)}
    key = _scalar(_s("key"), *fields.get(1, (_BYTES, b"")), where)
    wire, value = fields.get(2, (_BYTES, b""))
    if field.kind == "message":
        return key, message(field.message, value, where=f"{where}[{key}]")
    return key, _scalar(field, wire, value, f"{where}[{key}]")


def message(name: str, data: bytes, *, where: str = "") -> dict[str, Any]:
    """One message as the JSON a client would send: zeros left out, unknowns refused."""
    schema = MESSAGES[name]
    body: dict[str, Any] = {}
    for number, wire, value in _entries(data):
        field = schema.get(number)
        path = f"{where}.{field.name}" if field and where else (field.name if field else where)
        if field is None:
            if (name == "ObjectMeta" and number in _SERVER_SET) or name == "Ignored":
                continue
            if _zero(wire, value):
                continue
            raise Unreadable(f"field {number} of {name} (in {where or 'the object'})")
        if field.mapping:
            key, item = _map_entry(field, value, path)
            body.setdefault(field.name, {})[key] = item
            continue
        if field.kind == "message":
            item = message(field.message, value, where=path)
        elif field.kind == "intorstring":
            item = _int_or_string(value)
        else:
            item = _scalar(field, wire, value, path)
        if field.repeated:
            body.setdefault(field.name, []).append(item)
        elif field.pointer or item not in ("", 0, False, {}):
            body[field.name] = item
    return body


def decode(data: bytes) -> dict[str, Any]:
    """The object in a Kubernetes protobuf body, as JSON would carry it."""
    if not data.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix")
    envelope = {number: value for number, _, value in _entries(data[len(MAGIC) :])}
    type_meta = {number: value for number, _, value in _entries(envelope.get(1, b""))}
    api_version = bytes(type_meta.get(1, b"")).decode("utf-8", "replace")
    kind = bytes(type_meta.get(2, b"")).decode("utf-8", "replace")
    if envelope.get(3) or envelope.get(4):
        raise Unreadable("an encoded or typed raw object")
    name = KINDS.get((api_version, kind))
    if name is None:
        raise Unreadable(f"kind {kind or '(none)'} of {api_version or '(no apiVersion)'}")
    body = message(name, bytes(envelope.get(2, b"")))
    return {"apiVersion": api_version, "kind": kind, **body}
