"""The help ``ehb --help`` and each group's ``--help`` list: one short line per command, in
one voice, and a line of its own for each group of commands."""

from __future__ import annotations

import argparse

import pytest

from eventhub_balancer import cli

#: Longer than this, argparse wraps a command's line in the list over three lines or more.
LONGEST = 90


def _lines(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each command's line in the list of ``parser``'s --help, by name."""
    lines: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                lines[choice.dest] = choice.help or ""
    return lines


def _groups(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found = {prefix: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= _groups(child, (*prefix, name))
    return found


def test_each_line_of_a_commands_list_is_short_and_in_one_voice() -> None:
    parsers = _groups(cli.build_parser())
    lines = {(*p, n): line for p, parser in parsers.items() for n, line in _lines(parser).items()}
    # Both distributions' commands, the devstack's too.
    assert {("checkpoints", "list"), ("bench", "lag"), ("local", "up")} <= set(lines)
    for path, line in lines.items():
        assert line, path
        assert line[0].islower() or line[0] in "`-", (path, line)
        assert not line.endswith("."), (path, line)
        assert len(line) <= LONGEST, (path, len(line), line)


def test_a_group_says_what_its_commands_are_for() -> None:
    parsers = _groups(cli.build_parser())
    groups = [p for p in parsers if p and _lines(parsers[p])]
    assert {("checkpoints",), ("bench",), ("local",), ("spark",), ("chart",)} <= set(groups)
    top = _lines(parsers[()])
    for (name,) in groups:
        assert not top[name].startswith("commands:"), (name, top[name])
        assert parsers[(name,)].description == top[name]


def test_a_commands_own_help_gives_its_description_in_full(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "lag", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Exits 1 when a round is over the 20 s target." in out


def test_a_group_without_a_line_of_its_own_names_its_commands() -> None:
    class Module:
        def __init__(self, *command: str) -> None:
            self.COMMAND = command

    modules = [Module("tools", "b"), Module("tools", "a"), Module("other", "c")]
    assert cli.group_help(("tools",), modules) == "commands: a, b"  # type: ignore[arg-type]
