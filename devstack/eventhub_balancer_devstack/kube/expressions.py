"""CEL expressions as the API server evaluates them: CRD rules and admission policies.

Both ``x-kubernetes-validations`` and ValidatingAdmissionPolicies are CEL; one wrapper around
cel-python keeps their common part (compiling once, JSON in, plain Python out, errors as one
exception) out of the two places that decide what a result means.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import celpy
import celpy.adapter
import celpy.celtypes
import celpy.evaluation


class ExpressionError(Exception):
    """An expression that does not compile or fails to evaluate (a missing field, a bad type)."""


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    env = celpy.Environment()
    try:
        return env.program(env.compile(expression))
    except Exception as e:  # cel-python raises its own parse errors, no common base
        raise ExpressionError(f"compilation failed: {e}") from e


def check(expression: str) -> None:
    """Compile ``expression`` (cached); ExpressionError if it is not valid CEL."""
    _program(expression)


def _to_python(value: Any) -> Any:
    if isinstance(value, celpy.celtypes.BoolType):
        return bool(value)
    if isinstance(value, celpy.celtypes.IntType | celpy.celtypes.UintType):
        return int(value)
    if isinstance(value, celpy.celtypes.DoubleType):
        return float(value)
    if isinstance(value, celpy.celtypes.StringType):
        return str(value)
    if isinstance(value, celpy.celtypes.ListType):
        return [_to_python(item) for item in value]
    if isinstance(value, celpy.celtypes.MapType):
        return {_to_python(k): _to_python(v) for k, v in value.items()}
    return value


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """The value of ``expression`` with JSON-like ``variables``; ExpressionError on failure."""
    program = _program(expression)
    context = {name: celpy.adapter.json_to_cel(value) for name, value in variables.items()}
    try:
        result = program.evaluate(context)
    except Exception as e:  # CELEvalError and the Python errors it wraps
        raise ExpressionError(str(e.args[0] if e.args else e)) from e
    if isinstance(result, celpy.evaluation.CELEvalError):
        raise ExpressionError(str(result.args[0] if result.args else result))
    return _to_python(result)


def matches(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` as an OpenAPI ``pattern`` does on a
    real API server: with RE2, Go's regexp syntax, in which ``$`` is the end of the text
    (Python's ``re`` also matches it before a final newline, and so took "name\\n" for
    ``^[a-z]+$``). CEL's ``matches`` is that same search; ExpressionError if the pattern is not
    one RE2 compiles."""
    return evaluate("text.matches(pattern)", {"text": text, "pattern": pattern}) is True
