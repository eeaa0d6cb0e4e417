"""Every number flag of ``ehb`` refuses what no count, rate or wait can be.

``float()`` takes "nan", "inf" and "1e309", and a check made after parsing (``seconds <= 0``)
is false for NaN, so a bare ``type=float`` let a soak of NaN seconds or a timeout of for ever
through. Each number flag takes `flagtypes.number` instead; this walks the whole parser, so a
new flag with a bare ``float`` fails here.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from eventhub_balancer import cli
from eventhub_balancer.cli import flagtypes

NOT_NUMBERS = ("nan", "inf", "-inf", "1e309", "NaN")


def flags(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from flags(sub, (*path, name))
        elif action.option_strings and action.type is not None:
            yield " ".join((*path, action.option_strings[-1])), action


def takes_fractions(action: argparse.Action) -> bool:
    try:
        return isinstance(action.type("1.5"), float)  # type: ignore[misc,operator]
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False


def refuses(action: argparse.Action, raw: str) -> bool:
    try:
        action.type(raw)  # type: ignore[misc,operator]
    except (argparse.ArgumentTypeError, ValueError):
        return True
    return False


def test_the_walk_finds_the_number_flags() -> None:
    found = {name for name, action in flags(cli.build_parser()) if takes_fractions(action)}
    assert {"consume --max-wait", "bench soak --seconds", "spark archive --timeout"} <= found


def test_no_number_flag_takes_nan_or_for_ever() -> None:
    taken = [
        f"{name} {raw}"
        for name, action in flags(cli.build_parser())
        if takes_fractions(action)
        for raw in NOT_NUMBERS
        if not refuses(action, raw)
    ]
    assert taken == []


@pytest.mark.parametrize(
    ("kind", "bounds", "raw", "message"),
    [
        (float, {"positive": True}, "0", "'0' is not positive"),
        (float, {"least": 0}, "-0.5", "'-0.5' is negative"),
        (int, {"least": 2}, "1", "'1' is less than 2"),
        (int, {}, "1.5", "'1.5' is not a whole number"),
        (
            float,
            {"source": "from the flag or env EHB_X"},
            "x",
            "'x' is not a finite number (from the flag or env EHB_X)",
        ),
    ],
)
def test_a_refusal_says_what_is_wrong(
    kind: type[int] | type[float], bounds: dict[str, object], raw: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        flagtypes.number(kind, **bounds)(raw)  # type: ignore[arg-type]
    assert str(refused.value) == message


def test_a_number_in_bounds_is_taken_as_its_kind() -> None:
    assert flagtypes.number(float, positive=True)("2.5") == 2.5
    assert flagtypes.number(int, least=0)("0") == 0
    assert isinstance(flagtypes.number(int)("3"), int)


def port_flags() -> list[tuple[str, argparse.Action]]:
    return [(name, action) for name, action in flags(cli.build_parser()) if name.endswith("port")]


def test_the_walk_finds_every_commands_port_flag() -> None:
    assert {name for name, _action in port_flags()} >= {
        "operator --metrics-port",
        "consume --port",
        "local blob --port",
        "local kube --port",
        "local eventhubs --port",
        "local up --eventhubs-port",
        "local up --blob-port",
        "local up --kube-port",
    }


@pytest.mark.parametrize("raw", ["70000", "-1", "x", "1.5", ""])
def test_every_port_flag_says_a_wrong_port_the_same_way(raw: str) -> None:
    """Before, ``ehb local blob``, ``local kube``, ``local eventhubs`` and ``local up`` each
    checked after parsing, in words of their own ("is not a port number (0-65535)", "is not a
    TCP port"), and took ``-1`` as far as that check."""
    said = {}
    for name, action in port_flags():
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            action.type(raw)  # type: ignore[misc,operator]
        said[name] = str(refused.value).split(" (from ")[0]
    assert set(said.values()) == {f"{raw!r} is not a port, 0 to 65535"}


def test_a_port_flag_takes_0_for_a_free_one_and_the_highest_port() -> None:
    for _name, action in port_flags():
        assert [action.type("0"), action.type("65535")] == [0, 65535]  # type: ignore[misc,operator]
