"""A ValidatingAdmissionPolicy evaluated by a real CEL implementation (cel-python).

The local API server does not run admission policies; this evaluates one the way the API
server does for one request: the match conditions first (a request they do not match is
admitted), then the variables, then every validation, with ``object``/``oldObject`` as the
API server passes them (None on CREATE/DELETE respectively).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import celpy


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """What the API server hands a policy: the operation, the user and the two objects."""

    operation: str  # CREATE | UPDATE | DELETE
    username: str
    extra: Mapping[str, list[str]]
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    #: The request's namespace (the object's), as ``request.namespace``.
    namespace: str = ""
    #: The name in the request's path, as ``request.name`` (a subresource's parent's).
    name: str = ""
    #: The user's groups, as ``request.userInfo.groups``.
    groups: tuple[str, ...] = ()


class Policy:
    def __init__(self, body: Mapping[str, Any]) -> None:
        self.spec = body["spec"]
        self.env = celpy.Environment()

    def _evaluate(self, expression: str, activation: dict[str, Any]) -> Any:
        program = self.env.program(self.env.compile(expression))
        return program.evaluate(activation)

    def matches_operation(self, request: Request) -> bool:
        rules = self.spec["matchConstraints"]["resourceRules"]
        return any(request.operation in rule.get("operations", []) for rule in rules)

    def matches_labels(self, request: Request) -> bool:
        selector = self.spec["matchConstraints"].get("objectSelector")
        if selector is None:
            return True  # no objectSelector: every object
        wanted = selector["matchLabels"]
        for obj in (request.object, request.old_object):
            labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
            if all(labels.get(k) == v for k, v in wanted.items()):
                return True
        return False

    def denials(self, request: Request, params: Mapping[str, Any] | None = None) -> list[str]:
        """The messages of the validations that fail (empty: admitted), for one param object
        (``params``; a binding with a selector runs the policy once per param)."""
        if not self.matches_operation(request) or not self.matches_labels(request):
            return []
        activation: dict[str, Any] = {
            "request": celpy.json_to_cel(
                {
                    "operation": request.operation,
                    "namespace": request.namespace,
                    "name": request.name,
                    "userInfo": {
                        "username": request.username,
                        "groups": list(request.groups),
                        "extra": dict(request.extra),
                    },
                }
            ),
            "object": celpy.json_to_cel(request.object) if request.object is not None else None,
            "oldObject": (
                celpy.json_to_cel(request.old_object) if request.old_object is not None else None
            ),
            "params": celpy.json_to_cel(params) if params is not None else None,
        }
        for condition in self.spec.get("matchConditions") or []:
            if not bool(self._evaluate(condition["expression"], activation)):
                return []
        variables: dict[str, Any] = {}
        for variable in self.spec.get("variables") or []:
            activation["variables"] = _map(variables)
            variables[variable["name"]] = self._evaluate(variable["expression"], activation)
        activation["variables"] = _map(variables)
        failed = []
        for validation in self.spec["validations"]:
            try:
                ok = bool(self._evaluate(validation["expression"], activation))
            except celpy.CELEvalError:
                ok = False  # an evaluation error denies (failurePolicy: Fail)
            if not ok:
                failed.append(self._message(validation, activation))
        return failed

    def _message(self, validation: Mapping[str, Any], activation: dict[str, Any]) -> str:
        expression = validation.get("messageExpression")
        if expression is None:
            return str(validation["message"])
        return str(self._evaluate(expression, activation))


def _map(values: Mapping[str, Any]) -> Any:
    return celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})
