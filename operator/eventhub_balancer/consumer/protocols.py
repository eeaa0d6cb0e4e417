"""What a handler is, as types a user's code and mypy can check, and the same check at start.

``ehb consume --handler mypkg.pipeline:process`` imports a function it has never seen. A
function that takes one argument, or a Spark handler written ``async def``, used to pass the
import and fail on the first batch, after partitions had been fenced and events received. So
:func:`load` checks the function against the protocol of its mode before anything connects,
and says which argument is missing (a function with a ``yield`` in it, which returns a
generator and runs nothing, is refused too); a module that fails to import because of *its own*
missing dependency is named as such, so the user installs the right package, and a module
with a syntax error or one that raises at import is reported in one line with where.

:class:`Handler` (``process(events, context)``, sync or async) and :class:`SparkHandler`
(``process(df, context)``, sync: Spark calls block) are exported by the consumer package, so a
handler module can state ``process: Handler = ...`` or annotate its parameters and have mypy
check it as ``ehb consume`` will.
"""

from __future__ import annotations

import inspect
import sysconfig
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from eventhub_balancer import errors
from eventhub_balancer.consumer import contexts, processing

if TYPE_CHECKING:  # pyspark is an optional extra; the types are for mypy only
    from pyspark.sql import DataFrame


class Handler(Protocol):
    """``process(events, context)``: one micro-batch of one partition.

    Return normally to have the batch checkpointed; raise to have it retried (then parked or
    dead-lettered by the consumer's policy). May be ``async def``; a plain function runs in a
    thread of its own.
    """

    def __call__(
        self, events: Sequence[contexts.Event], context: contexts.BatchContext, /
    ) -> Awaitable[None] | None: ...


class SparkHandler(Protocol):
    """``process(df, context)`` with ``ehb consume --spark``: one trigger over all the pod's
    partitions, as one DataFrame. A plain function (Spark calls block). Raise
    `PartitionsFailed` to fail only some partitions; ``context.spark`` is the SparkSession."""

    def __call__(self, df: DataFrame, context: contexts.TriggerContext, /) -> None: ...


def _shape(spark: bool) -> str:
    return "process(df, context)" if spark else "process(events, context)"


def _annotated_spark(signature: inspect.Signature) -> tuple[bool | None, str]:
    """Whether a handler's annotations make it a Spark one (a DataFrame, a TriggerContext:
    True) or a plain one (a BatchContext: False), and its parameters as annotated; None when
    they say neither, or both."""
    shown, found = [], []
    for p in list(signature.parameters.values())[:2]:
        a = p.annotation
        text = "" if a is p.empty else a if isinstance(a, str) else getattr(a, "__name__", str(a))
        shown.append(f"{p.name}: {text}" if text else p.name)
        found.append(text)
    first, second = [*found, "", ""][:2]
    spark = "DataFrame" in first or "TriggerContext" in second
    plain = "BatchContext" in second
    return (spark if spark != plain else None), ", ".join(shown)


def check(
    function: Callable[..., Any], *, reference: str, spark: bool, remedy: str | None = None
) -> None:
    """Refuse ``function`` unless it can be called as the handler of its mode; one annotated
    as the other mode's is refused with ``remedy`` (by default, the flag that switches mode)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C callable without a signature: nothing to check
    try:
        signature.bind(object(), object())
    except TypeError:
        given = ", ".join(
            p.name
            for p in signature.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
        raise errors.InvalidInput(
            "--handler",
            f"{reference} takes ({given}), but a handler is called with two arguments: "
            f"{_shape(spark)}",
        ) from None
    # A callable object's ``__call__`` is what runs (looked up on its class, as calls do).
    call = (
        function
        if inspect.isroutine(function)
        else inspect.getattr_static(type(function), "__call__", None)
    )
    if inspect.isgeneratorfunction(call) or inspect.isasyncgenfunction(call):
        raise errors.InvalidInput(
            "--handler",
            f"{reference} is a generator function (it has a yield): called, it returns a "
            "generator and runs nothing, so every batch would be checkpointed unhandled: "
            "remove the yield and do the work in the call",
        )
    if spark and inspect.iscoroutinefunction(function):
        raise errors.InvalidInput(
            "--handler",
            f"{reference} is async def, but with --spark the handler is a plain function "
            "(Spark calls block): drop async, or drop --spark for process(events, context)",
        )
    annotated, annotated_as = _annotated_spark(signature)
    if annotated is not None and annotated != spark:
        if annotated:
            kind, called = "a Spark handler", "process(events, context) with a list of events"
            switch = "give --spark (spark.enabled in the consumer chart)"
        else:
            kind, called = "a plain handler", "process(df, context) with one DataFrame"
            switch = "drop --spark (spark.enabled in the consumer chart)"
        raise errors.InvalidInput(
            "--handler",
            f"{reference} is {kind} ({annotated_as}), but it would be called as {called}: "
            f"{remedy or switch}",
        )


def _missing_dependency(module_name: str, cause: BaseException | None) -> str | None:
    """The module that could not be found while importing ``module_name``, when it is not
    ``module_name`` itself (nor one of its parent packages): a dependency of the handler."""
    if not isinstance(cause, ModuleNotFoundError) or not cause.name:
        return None
    missing = cause.name
    if module_name == missing or module_name.startswith(missing + "."):
        return None
    return missing


def load(
    reference: str, *, search_path: Sequence[str] = (), spark: bool, remedy: str | None = None
) -> Callable[..., Any]:
    """Import ``module:function`` and check it against the handler protocol of its mode
    (`check`, with ``remedy``)."""
    try:
        function = processing.load_handler(reference, search_path=search_path)
    except errors.InvalidInput as e:
        module_name = reference.partition(":")[0]
        missing = _missing_dependency(module_name, e.__cause__)
        if missing is None:
            raise
        raise errors.InvalidInput(
            "--handler",
            f"module {module_name!r} imports {missing!r}, which is not installed: add the "
            f"package that provides {missing!r} to the image (or to the handler's dependencies)",
        ) from e
    except SyntaxError as e:
        raise errors.InvalidInput(
            "--handler",
            f"{e.filename}, line {e.lineno}: {e.msg}: fix the handler module's syntax",
        ) from e
    except Exception as e:
        # The module's own code failed at import (a setting read from the environment, a
        # connection opened at import): where, and what, in one line.
        raise errors.InvalidInput(
            "--handler",
            f"importing {reference.partition(':')[0]!r} raised {type(e).__name__}: {e} "
            f"({_where(e)}): fix what the module does at import",
        ) from e
    check(function, reference=reference, spark=spark, remedy=remedy)
    return function


def _where(error: BaseException) -> str:
    """``file, line N`` of the innermost frame of ``error`` in the user's code: the standard
    library's and the import machinery's frames say nothing about what to fix."""
    stdlib = sysconfig.get_paths()["stdlib"]
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith(("<", stdlib))
    ]
    if not frames:
        return "no traceback"
    return f"{frames[-1].filename}, line {frames[-1].lineno}"
