"""No module of `eventhub_balancer.reconciling` holds state between two decisions.

A decision is a function of its observation, its carry and the time (`deciding.decide`):
what one cycle hands the next is the carry, which the caller keeps. A memo, a cache or any
mutable container at module level would be a second, hidden carry, shared by every consumer
and outliving them; so would a class attribute of that kind, or a ``global`` statement. Each
module of the package is imported and every value it holds is checked to be immutable all the
way down; the sources are read for ``global``.
"""

from __future__ import annotations
import __future__

import ast
import dataclasses
import datetime
import enum
import importlib
import inspect
import pkgutil
import sys
import types
import typing
from collections.abc import Iterator

import pytest

from eventhub_balancer import reconciling

#: Values that cannot change once made.
SCALARS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    range,
    type(Ellipsis),
    datetime.date,
    datetime.time,
    datetime.timedelta,
    datetime.tzinfo,
    enum.Enum,
    __future__._Feature,
)
#: Kinds of value that are code or typing constructs, not state (functions are checked for a
#: cache apart).
CODE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def module_names() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(reconciling.__path__, prefix=f"{reconciling.__name__}.")
    )


def mutable_part(value: object, *, depth: int = 0) -> str | None:
    """What in ``value`` can change (a memo, a container, a mutable object); None: nothing."""
    if depth > 20:
        return None  # deep enough: a cycle of immutable values
    if isinstance(value, SCALARS):
        return None
    if hasattr(value, "cache_info") or hasattr(value, "cache_clear"):
        return "a memo (functools cache)"
    if isinstance(value, CODE) or inspect.isclass(value):
        return None
    if isinstance(value, (property, classmethod, staticmethod)):
        return None
    if type(value).__module__ in ("typing", "types", "typing_extensions") or isinstance(
        value, (typing.TypeVar, types.GenericAlias)
    ):
        return None  # type aliases, TypeVars, NewTypes, Literal[...] and the like
    if isinstance(value, (tuple, frozenset)):
        return next(
            (found for item in value if (found := mutable_part(item, depth=depth + 1))), None
        )
    if isinstance(value, types.MappingProxyType):
        return next(
            (found for pair in value.items() if (found := mutable_part(pair, depth=depth + 1))),
            None,
        )
    if dataclasses.is_dataclass(value):
        params = getattr(type(value), "__dataclass_params__", None)
        if params is None or not params.frozen:
            return f"a mutable {type(value).__name__}"
        return next(
            (
                found
                for field in dataclasses.fields(value)
                if (found := mutable_part(getattr(value, field.name), depth=depth + 1))
            ),
            None,
        )
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def held_state(module: types.ModuleType) -> Iterator[str]:
    """Each value ``module`` holds (at module level, or as an attribute of a class it defines)
    that can change between two calls."""
    for name, value in vars(module).items():
        if name.startswith("__") and name.endswith("__"):
            continue
        if (found := mutable_part(value)) is not None:
            yield f"{module.__name__}.{name} is {found}"
        if inspect.isclass(value) and value.__module__ == module.__name__:
            for attribute, held in vars(value).items():
                if attribute.startswith("__") and attribute.endswith("__"):
                    continue
                if attribute.startswith("_abc_"):
                    continue
                if (found := mutable_part(held)) is not None:
                    yield f"{module.__name__}.{name}.{attribute} is {found}"


def globals_declared(module: types.ModuleType) -> list[str]:
    tree = ast.parse(inspect.getsource(module))
    return [
        f"{module.__name__}:{node.lineno} global {', '.join(node.names)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Global)
    ]


def test_the_package_has_modules_to_check() -> None:
    names = module_names()
    assert f"{reconciling.__name__}.deciding" in names
    assert len(names) >= 10


@pytest.mark.parametrize("name", module_names())
def test_a_module_holds_no_mutable_state(name: str) -> None:
    module = importlib.import_module(name)
    assert list(held_state(module)) == []
    assert globals_declared(module) == []


def test_the_check_finds_a_memo_a_container_and_a_mutable_object() -> None:
    """The check itself can fail: a module holding any of these is reported."""
    import functools

    @dataclasses.dataclass
    class Counter:
        count: int = 0

    @dataclasses.dataclass(frozen=True)
    class Table:
        rows: object

    module = types.ModuleType("eventhub_balancer.reconciling.example")
    module.KEPT = {}  # type: ignore[attr-defined]
    module.SEEN = [1]  # type: ignore[attr-defined]
    module.name_key = functools.lru_cache(maxsize=8)(str.lower)  # type: ignore[attr-defined]
    module.COUNTER = Counter()  # type: ignore[attr-defined]
    module.TABLE = Table(rows=(1, {2: 3}))  # type: ignore[attr-defined]
    module.FINE = types.MappingProxyType({"a": (1, 2)})  # type: ignore[attr-defined]
    module.ALSO_FINE = Table(rows=frozenset({1}))  # type: ignore[attr-defined]
    found = sorted(held_state(module))
    assert [line.split(" is ")[0].rsplit(".", 1)[1] for line in found] == [
        "COUNTER",
        "KEPT",
        "SEEN",
        "TABLE",
        "name_key",
    ]
    assert sys.modules.get(module.__name__) is None
