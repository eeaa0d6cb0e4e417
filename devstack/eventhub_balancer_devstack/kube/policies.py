"""ValidatingAdmissionPolicies: CEL checks the API server runs on every write, before storing.

The project limits what a consumer pod may change with a policy (its identity may touch only
its own ConfigMap's annotations); tested against a server that ignores policies, a pod that
oversteps would pass. This evaluates ``admissionregistration.k8s.io/v1`` policies and their
bindings, stored as ordinary objects, as the real plugin does: ``matchConstraints`` and the
binding's ``matchResources`` (rules, operations, namespace and object selectors),
``matchConditions``, ``variables`` and ``validations``, with ``object``, ``oldObject``,
``request`` (``userInfo`` included), ``namespaceObject`` and ``params`` (always null: no
``paramKind`` support). A denial is the real server's: "is forbidden: ValidatingAdmissionPolicy
'P' with binding 'B' denied request: MESSAGE", reason Invalid (422) unless the validation names
another. Pure: objects in, a failure raised or nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from eventhub_balancer_devstack.kube import expressions, failures, identities, resources

Operation = Literal["CREATE", "UPDATE", "DELETE"]

_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Attributes:
    """One write as admission sees it."""

    spec: resources.ResourceSpec
    operation: Operation
    name: str
    namespace: str
    subresource: str | None
    new: Mapping[str, Any] | None
    old: Mapping[str, Any] | None
    user: identities.UserInfo
    namespace_object: Mapping[str, Any] | None = None

    def request(self) -> dict[str, Any]:
        spec = self.spec
        gvk = {"group": spec.group, "version": spec.version, "kind": spec.kind}
        gvr = {"group": spec.group, "version": spec.version, "resource": spec.plural}
        return {
            "uid": "",
            "kind": gvk,
            "resource": gvr,
            "subResource": self.subresource or "",
            "requestKind": gvk,
            "requestResource": gvr,
            "requestSubResource": self.subresource or "",
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": dict(self.user),
            "dryRun": False,
        }


def _listed(values: Any, value: str) -> bool:
    return isinstance(values, list) and ("*" in values or value in values)


def _rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    spec = attrs.spec
    resource = spec.plural + (f"/{attrs.subresource}" if attrs.subresource else "")
    names: Sequence[str] = rule.get("resources") or ()
    resource_matches = (
        resource in names
        or "*/*" in names
        or (attrs.subresource is None and "*" in names)
        or (attrs.subresource is not None and f"{spec.plural}/*" in names)
        or (attrs.subresource is not None and f"*/{attrs.subresource}" in names)
    )
    scope = rule.get("scope") or "*"
    scope_matches = scope == "*" or (scope == "Namespaced") == spec.namespaced
    resource_names = rule.get("resourceNames") or []
    return (
        resource_matches
        and scope_matches
        and _listed(rule.get("operations"), attrs.operation)
        and _listed(rule.get("apiGroups"), spec.group)
        and _listed(rule.get("apiVersions"), spec.version)
        and (not resource_names or attrs.name in resource_names)
    )


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _labels(body: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((body or {}).get("metadata") or {}).get("labels") or {}


def _resources_match(match: Mapping[str, Any] | None, attrs: Attributes) -> bool:
    """A policy's ``matchConstraints`` or a binding's ``matchResources``."""
    if not match:
        return True
    rules = match.get("resourceRules")
    if rules is not None and not any(_rule_matches(r, attrs) for r in rules):
        return False
    if any(_rule_matches(r, attrs) for r in match.get("excludeResourceRules") or ()):
        return False
    object_selector = match.get("objectSelector")
    if object_selector and not any(
        _selector_matches(object_selector, _labels(body))
        for body in (attrs.new, attrs.old)
        if body is not None
    ):
        return False
    namespace_selector = match.get("namespaceSelector")
    return not (
        namespace_selector
        and attrs.spec.namespaced
        and not _selector_matches(namespace_selector, _labels(attrs.namespace_object))
    )


def _forbid(
    attrs: Attributes, *, policy: str, binding: str, message: str, reason: str
) -> failures.APIFailure:
    spec = attrs.spec
    what = f"{spec.plural}.{spec.group}" if spec.group else spec.plural
    text = (
        f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"
    )
    details: dict[str, Any] = {
        "name": attrs.name,
        "kind": spec.plural,
        "causes": [{"message": text}],
    }
    if spec.group:
        details["group"] = spec.group
    return failures.APIFailure(
        code=_CODES.get(reason, 422),
        reason=reason,
        message=f'{what} "{attrs.name}" is forbidden: {text}',
        details=details,
    )


def _evaluate_policy(
    policy: Mapping[str, Any], binding: Mapping[str, Any], attrs: Attributes
) -> failures.APIFailure | None:
    spec = policy.get("spec") or {}
    policy_name = policy["metadata"]["name"]
    binding_name = binding["metadata"]["name"]
    fail_open = spec.get("failurePolicy") == "Ignore"
    variables: dict[str, Any] = {
        "object": attrs.new,
        "oldObject": attrs.old,
        "request": attrs.request(),
        "params": None,
        "namespaceObject": attrs.namespace_object,
    }

    def error(detail: str) -> failures.APIFailure | None:
        if fail_open:
            return None
        return _forbid(
            attrs, policy=policy_name, binding=binding_name, message=detail, reason="Invalid"
        )

    for condition in spec.get("matchConditions") or ():
        try:
            matched = expressions.evaluate(str(condition.get("expression")), variables)
        except expressions.ExpressionError as e:
            return error(f"expression '{condition.get('expression')}' resulted in error: {e}")
        if matched is not True:
            return None
    computed: dict[str, Any] = {}
    for variable in spec.get("variables") or ():
        try:
            computed[str(variable["name"])] = expressions.evaluate(
                str(variable["expression"]), {**variables, "variables": computed}
            )
        except expressions.ExpressionError as e:
            return error(f"variable '{variable.get('name')}' resulted in error: {e}")
    scope = {**variables, "variables": computed}
    for validation in spec.get("validations") or ():
        expression = str(validation.get("expression"))
        try:
            passed = expressions.evaluate(expression, scope)
        except expressions.ExpressionError as e:
            return error(f"expression '{expression}' resulted in error: {e}")
        if passed is True:
            continue
        message = str(validation.get("message") or f"failed expression: {expression}")
        if validation.get("messageExpression"):
            # The server keeps the static message when the expression fails.
            with contextlib.suppress(expressions.ExpressionError):
                message = str(expressions.evaluate(str(validation["messageExpression"]), scope))
        return _forbid(
            attrs,
            policy=policy_name,
            binding=binding_name,
            message=message,
            reason=str(validation.get("reason") or "Invalid"),
        )
    return None


def admit(
    attrs: Attributes,
    *,
    policies: Iterable[Mapping[str, Any]],
    bindings: Iterable[Mapping[str, Any]],
) -> None:
    """Raise the first denial of a bound policy with the Deny action; nothing if admitted."""
    by_name = {p["metadata"]["name"]: p for p in policies}
    for binding in sorted(bindings, key=lambda b: str(b["metadata"]["name"])):
        binding_spec = binding.get("spec") or {}
        policy = by_name.get(binding_spec.get("policyName"))
        if policy is None or "Deny" not in (binding_spec.get("validationActions") or ()):
            continue
        if binding_spec.get("paramRef"):
            continue  # params are not supported: such a binding never matches here
        policy_spec = policy.get("spec") or {}
        if not _resources_match(policy_spec.get("matchConstraints"), attrs):
            continue
        if not _resources_match(binding_spec.get("matchResources"), attrs):
            continue
        denial = _evaluate_policy(policy, binding, attrs)
        if denial is not None:
            raise denial
