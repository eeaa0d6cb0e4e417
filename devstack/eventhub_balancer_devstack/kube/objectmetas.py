"""The API server's checks of an object's ``metadata``, worded as it words them.

Names, generated-name prefixes, label keys and values, annotation keys and finalizers are
checked by every kind on create and update (apimachinery's ``ValidateObjectMetaAccessor``).
A client shows the refusal's message and, per field, ``details.causes``; the conformance tests
compare both with a real kube-apiserver's, so the rules and their sentences are the ones of
apimachinery's ``util/validation`` and ``api/validate/content``. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from eventhub_balancer_devstack.kube import validating

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + "(\\." + _LABEL_FMT + ")*"
_KEY_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _KEY_NAME_FMT + ")?"

_DNS_LABEL = re.compile(f"^{_LABEL_FMT}$")
_DNS_SUBDOMAIN = re.compile(f"^{_SUBDOMAIN_FMT}$")
_KEY_NAME = re.compile(f"^{_KEY_NAME_FMT}$")
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")

#: The longest DNS label and subdomain (RFC 1123), label key name and label value.
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_PART_MAX = 63

#: The most bytes all annotations of one object may hold together (keys and values).
ANNOTATIONS_MAX_BYTES = 256 * 1024


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's ``RegexError``: the rule, its examples and the regex itself."""
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


_SUBDOMAIN_ERROR = _regex_error(
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character",
    _SUBDOMAIN_FMT,
    "example.com",
)
_LABEL_ERROR = _regex_error(
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character",
    _LABEL_FMT,
    "my-name",
    "123-abc",
)
_KEY_NAME_ERROR = _regex_error(
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character",
    _KEY_NAME_FMT,
    "MyName",
    "my.name",
    "123-abc",
)
_LABEL_VALUE_ERROR = _regex_error(
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character",
    _LABEL_VALUE_FMT,
    "MyValue",
    "my_value",
    "12345",
)


def subdomain_problems(value: str) -> list[str]:
    """What makes ``value`` no DNS subdomain (``IsDNS1123Subdomain``); empty if it is one."""
    problems = []
    if len(value) > DNS_SUBDOMAIN_MAX:
        problems.append(f"must be no more than {DNS_SUBDOMAIN_MAX} characters")
    if not _DNS_SUBDOMAIN.match(value):
        problems.append(_SUBDOMAIN_ERROR)
    return problems


def label_problems(value: str) -> list[str]:
    """What makes ``value`` no DNS label (``IsDNS1123Label``); empty if it is one."""
    problems = []
    if len(value) > DNS_LABEL_MAX:
        problems.append(f"must be no more than {DNS_LABEL_MAX} characters")
    if not _DNS_LABEL.match(value):
        # A subdomain of a valid length that is no label has dots in it.
        problems.append("must not contain dots" if _DNS_SUBDOMAIN.match(value) else _LABEL_ERROR)
    return problems


def label_key_problems(key: str) -> list[str]:
    """``IsQualifiedName``: an optional DNS subdomain prefix and ``/``, then a name."""
    parts = key.split("/")
    if len(parts) > 2:
        return [
            f"a valid label key {_KEY_NAME_ERROR} with an optional DNS subdomain prefix and "
            "'/' (e.g. 'example.com/MyName')"
        ]
    problems = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems.extend(f"prefix part {p}" for p in subdomain_problems(prefix))
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > LABEL_PART_MAX:
        problems.append(f"name part must be no more than {LABEL_PART_MAX} bytes")
    if not _KEY_NAME.match(name):
        problems.append(f"name part {_KEY_NAME_ERROR}")
    return problems


def label_value_problems(value: str) -> list[str]:
    problems = []
    if len(value) > LABEL_PART_MAX:
        problems.append(f"must be no more than {LABEL_PART_MAX} bytes")
    if not _LABEL_VALUE.match(value):
        problems.append(_LABEL_VALUE_ERROR)
    return problems


def _invalid(field: str, value: Any, detail: str) -> validating.Cause:
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {json.dumps(value)}: {detail}",
        "field": field,
    }


def check(metadata: Mapping[str, Any], *, dns_label: bool) -> list[validating.Cause]:
    """The causes a real API server gives for this ``metadata`` (empty if it is valid).

    ``dns_label``: the kind's names are DNS labels (namespaces), not DNS subdomains.
    """
    name_rule = label_problems if dns_label else subdomain_problems
    causes: list[validating.Cause] = []
    prefix = metadata.get("generateName")
    if isinstance(prefix, str) and prefix:
        # A prefix may end in '-': the server checks it with its last two characters
        # replaced by a letter (apimachinery's maskTrailingDash, to the letter).
        masked = prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
        causes += [_invalid("metadata.generateName", prefix, p) for p in name_rule(masked)]
    name = str(metadata.get("name") or "")
    if not name:
        causes.append(
            {
                "reason": "FieldValueRequired",
                "message": "Required value: name or generateName is required",
                "field": "metadata.name",
            }
        )
    else:
        causes += [_invalid("metadata.name", name, p) for p in name_rule(name)]
    labels = metadata.get("labels") or {}
    for key, value in labels.items() if isinstance(labels, Mapping) else ():
        causes += [_invalid("metadata.labels", key, p) for p in label_key_problems(str(key))]
        if not isinstance(value, str):
            causes.append(_invalid("metadata.labels", value, "must be a string"))
        else:
            causes += [_invalid("metadata.labels", value, p) for p in label_value_problems(value)]
    annotations = metadata.get("annotations") or {}
    if isinstance(annotations, Mapping):
        for key in annotations:
            # Annotation keys are label keys whose case does not matter.
            problems = label_key_problems(str(key).lower())
            causes += [_invalid("metadata.annotations", key, p) for p in problems]
        size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
        if size > ANNOTATIONS_MAX_BYTES:
            causes.append(
                {
                    "reason": "FieldValueTooLong",
                    "message": f"Too long: may not be more than {ANNOTATIONS_MAX_BYTES} bytes",
                    "field": "metadata.annotations",
                }
            )
    return causes
