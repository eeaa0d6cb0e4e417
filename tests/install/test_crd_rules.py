"""The CRD's CEL rules (x-kubernetes-validations), run by a real CEL implementation (cel-python).

The API server runs these rules on every write of an EventHubConsumer; the local API server
does not, so this walks the schema beside an object as the API server does (a rule runs with
``self`` bound to the value of its node, when the value is there) and collects the messages.
Each rule must carry a message that names the field to change: the API server's default
("failed rule: ...") and its structural messages ("Too many: 2: must have at most 1 item")
do not.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import celpy
import jsonschema
import pytest

from tests.support import loading

CRD = next(
    d.body
    for d in loading.file_documents(loading.CRDS_DIR)
    if d.kind == "CustomResourceDefinition"
    and d.body["spec"]["names"]["kind"] == "EventHubConsumer"
)
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def rules(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path or "<root>", rule
    for name, child in (schema.get("properties") or {}).items():
        yield from rules(child, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from rules(schema["items"], f"{path}[]")


def failures(body: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> list[str]:
    """The messages of the rules ``body`` fails, as the API server would report them
    (``.spec.eventHub.credentials: give exactly one of ...``)."""
    env = celpy.Environment()
    found = []

    def walk(schema: dict[str, Any], value: Any, path: str) -> None:
        for rule in schema.get("x-kubernetes-validations") or []:
            program = env.program(env.compile(rule["rule"]))
            try:
                ok = bool(program.evaluate({"self": celpy.json_to_cel(value)}))
            except celpy.CELEvalError:
                ok = False
            if not ok:
                found.append(f"{path}: {rule['message']}")
        if isinstance(value, dict):
            for name, child in (schema.get("properties") or {}).items():
                if name in value:
                    walk(child, value[name], f"{path}.{name}")

    walk(schema, body, "")
    return found


def example() -> dict[str, Any]:
    (consumer,) = [
        d.body
        for d in loading.file_documents(loading.MANIFESTS_DIR / "examples")
        if d.kind == "EventHubConsumer" and d.source.startswith("manifests/examples/20-")
    ]
    return copy.deepcopy(consumer)


def test_every_rule_has_a_message_that_names_a_field() -> None:
    found = list(rules(SCHEMA))
    assert len(found) >= 3
    for path, rule in found:
        message = " ".join(str(rule.get("message", "")).split())
        assert message, f"{path}: a rule without a message reports 'failed rule: ...'"
        field = path.split(".")[-1]
        assert field in message or "." in message, f"{path}: {message!r} names no field"


def test_the_shipped_example_passes_every_rule() -> None:
    assert failures(example()) == []


@pytest.mark.parametrize("store", ["eventHub", "checkpointStore"])
def test_both_credentials_say_which_to_keep(store: str) -> None:
    body = example()
    body["spec"][store]["credentials"] = {
        "connectionStringSecretRef": {"name": "s", "key": "k"},
        "workloadIdentity": {},
    }
    if store == "checkpointStore":
        body["spec"][store]["accountUrl"] = "https://shop.blob.core.windows.net"
    (message,) = failures(body)
    assert message.startswith(f".spec.{store}.credentials: give exactly one of ")
    assert f"{store}.credentials.connectionStringSecretRef" in message
    assert f"{store}.credentials.workloadIdentity" in message


@pytest.mark.parametrize("store", ["eventHub", "checkpointStore"])
def test_no_credentials_say_what_to_give(store: str) -> None:
    body = example()
    body["spec"][store]["credentials"] = {}
    (message,) = failures(body)
    assert "give exactly one of" in message


def test_one_credential_of_either_kind_passes() -> None:
    body = example()
    body["spec"]["eventHub"]["credentials"] = {"workloadIdentity": {}}
    body["spec"]["checkpointStore"]["credentials"] = {"workloadIdentity": {}}
    body["spec"]["checkpointStore"]["accountUrl"] = "https://shop.blob.core.windows.net"
    assert failures(body) == []


#: spec.startPosition's mistakes and the API server's message for each, by the local API's
#: validator (the schema's own checks, as kube-openapi words them): each names what to give,
#: never "must validate one and only one schema (oneOf)".
START_POSITION_MISTAKES = [
    (
        "beginning",
        'spec.startPosition: Invalid value: "beginning": spec.startPosition in body should '
        "match '^(earliest|latest)$'",
    ),
    (
        {"sequenceNumber": 5, "enqueuedTime": "2026-01-01T00:00:00Z"},
        # A size error keeps the CRD's CEL rules from running, and a real server says so.
        "[spec.startPosition: Too many: 2: must have at most 1 item, <nil>: Invalid value: "
        "null: some validation rules were not checked because the object was invalid; correct "
        "the existing errors to complete validation]",
    ),
    (
        # As a real kube-apiserver words it: anyOf names the field in its message only, and
        # adds its first branch's error, which says what to give.
        {"offset": "5"},
        '[<nil>: Invalid value: "": "spec.startPosition" must validate at least one schema '
        "(anyOf), spec.startPosition.sequenceNumber: Required value, <nil>: Invalid value: "
        "null: some validation rules were not checked because the object was invalid; correct "
        "the existing errors to complete validation]",
    ),
]


@pytest.mark.parametrize(("position", "message"), START_POSITION_MISTAKES, ids=str)
def test_a_wrong_start_position_gets_a_message_that_says_what_to_give(
    position: Any, message: str
) -> None:
    from eventhub_balancer_devstack.kube import validating

    body = example()
    body["spec"]["startPosition"] = position
    assert validating.summary(validating.validate(body, SCHEMA)) == message


@pytest.mark.parametrize(
    "position",
    ["earliest", "latest", {"sequenceNumber": 0}, {"enqueuedTime": "2026-01-01T00:00:00Z"}],
    ids=str,
)
def test_every_documented_start_position_passes(position: Any) -> None:
    from eventhub_balancer_devstack.kube import validating

    body = example()
    body["spec"]["startPosition"] = position
    assert validating.validate(body, SCHEMA) == []


@pytest.mark.parametrize("position", [5, True, "", {}], ids=repr)
def test_neither_a_string_nor_an_object_with_one_key_is_refused(position: Any) -> None:
    from eventhub_balancer_devstack.kube import validating

    body = example()
    body["spec"]["startPosition"] = position
    assert validating.validate(body, SCHEMA) != []
    assert list(jsonschema.Draft7Validator(SCHEMA).iter_errors(body)) != []


def messages(store: str, field: str) -> list[str]:
    """The messages of ``spec.<store>.<field>``'s rules, in their order."""
    schema = SCHEMA["properties"]["spec"]["properties"][store]["properties"][field]
    return [" ".join(rule["message"].split()) for rule in schema["x-kubernetes-validations"]]


def host_messages() -> list[str]:
    return messages("eventHub", "fullyQualifiedNamespace")


def blob_messages() -> list[str]:
    return messages("checkpointStore", "accountUrl")


#: A host that is not one, and which of the rules (`host_messages`) refuses it: the usual
#: mistake first, the namespace copied from its connection string or from a URL. A pattern
#: refused these, and kubectl showed the pattern.
HOST_MISTAKES = [
    ("https://shop.servicebus.windows.net/", 0),
    ("sb://shop.servicebus.windows.net", 0),
    ("Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=v", 0),
    ("shop.servicebus.windows.net/orders", 0),
    ("shop..servicebus.windows.net", 1),
    ("-shop.servicebus.windows.net", 1),
    ("-shop.example:0", 1),
    ("shop servicebus", 1),
    ("127.0.0.1:5672\n", 1),
    ("shop.example:123456", 1),
    ("shop.example:99999", 2),
    ("127.0.0.1:0", 2),
]


#: An account URL that is not one, and which of the rules (`blob_messages`) refuses it.
BLOB_MISTAKES = [
    ("DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=k", 0),
    ("shop.blob.core.windows.net", 1),
    ("http://shop.blob.core.windows.net", 1),
    ("https://shop.blob.core.windows.net/checkpoints", 2),
    ("https://shop..blob.core.windows.net", 3),
    ("https://sh op", 3),
    ("https://shop.example:123456", 3),
    ("https://a.example:65536/", 4),
    ("https://-a.example:0/", 3),
    ("https://a.example:0", 4),
]


#: A container name that is not one, and which rule (`container_messages`) refuses it.
CONTAINER_MISTAKES = [
    ("Checkpoints", 0),
    ("orders_checkpoints", 0),
    ("-orders", 0),
    ("checkpoints\n", 0),
    ("order--checkpoints", 1),
]


def container_messages() -> list[str]:
    return messages("checkpointStore", "containerName")


#: Each field whose rules say what to give: its mistakes, and values it takes.
FIELDS = {
    ("eventHub", "fullyQualifiedNamespace"): (
        HOST_MISTAKES,
        ["shop.servicebus.windows.net", "127.0.0.1:5672", "a.example:65535", "localhost"],
    ),
    ("checkpointStore", "accountUrl"): (
        BLOB_MISTAKES,
        [
            "https://shop.blob.core.windows.net",
            "https://shop.blob.core.windows.net/",
            "https://shop.blob.core.windows.net:443/",
            "https://127.0.0.1:10000",
        ],
    ),
    ("checkpointStore", "containerName"): (CONTAINER_MISTAKES, ["checkpoints", "a-1-b"]),
}


def with_field(store: str, field: str, value: str) -> list[str]:
    """The failures of the example with ``spec.<store>.<field>`` set to ``value``."""
    body = example()
    body["spec"][store][field] = value
    return failures(body)


@pytest.mark.parametrize(
    ("store", "field", "value", "rule"),
    [(*where, value, rule) for where, (mistakes, _) in FIELDS.items() for value, rule in mistakes],
)
def test_a_value_that_is_not_one_says_what_to_give(
    store: str, field: str, value: str, rule: int
) -> None:
    """One rule refuses each mistake, with a message that says what to give."""
    said = messages(store, field)[rule]
    assert with_field(store, field, value) == [f".spec.{store}.{field}: {said}"]
    assert ": give " in said or ": use " in said


@pytest.mark.parametrize(
    ("store", "field", "value"),
    [(*where, value) for where, (_, taken) in FIELDS.items() for value in taken],
)
def test_a_value_that_is_one_passes(store: str, field: str, value: str) -> None:
    assert with_field(store, field, value) == []
