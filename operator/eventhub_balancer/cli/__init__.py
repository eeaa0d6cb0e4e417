"""The `ehb` command line.

Each command lives in its own module and declares where it hangs in the command tree
(``COMMAND = ("checkpoints", "list")``), so that commands are added without editing a central
table. The product's commands are the modules of this package; other distributions add theirs
through the ``eventhub_balancer.commands`` entry-point group (the development stack adds
``ehb local``, ``ehb demo``, ``ehb bench`` and ``ehb chart`` that way). A module provides::

    COMMAND: tuple[str, ...]          # the path of sub-commands
    HELP: str                         # one line for --help
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...     # the exit status

Every module is imported at start-up, so command modules import their heavy dependencies
(the SDKs, pyspark) inside ``run``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.metadata
import logging
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NoReturn, cast

import yaml

from eventhub_balancer import __version__, errors
from eventhub_balancer.cli import kubecontexts, logformats

#: Exit status for bad input: the message names what to change.
EXIT_USAGE = 2
#: Exit status for a dependency that did not answer (a Kubernetes API server, Event Hubs or
#: Blob Storage unreachable, timing out, answering 5xx or 429) or was busy (a write that
#: conflicted): nothing was concluded about what was asked, and running it again later may
#: succeed (sysexits' ``EX_TEMPFAIL``). Every other refusal of a dependency (not found,
#: forbidden, invalid) stays 1, as scripts read it before.
EXIT_UNAVAILABLE = 75
#: The log format when --log-format is not given (text or json).
ENV_LOG_FORMAT = "EHB_LOG_FORMAT"
#: The entry-point group through which other distributions add command modules.
ENTRY_POINT_GROUP = "eventhub_balancer.commands"
#: The commands that act with the caller's kubeconfig: a 403 is a right its user lacks.
USER_COMMANDS = frozenset({"status", "checkpoints", "deadletters"})
#: What a 403 advises (`kubeclients`), written for the operator's own requests.
OPERATOR_ADVICE = "grant the operator's ServiceAccount access"
#: What it advises instead for `USER_COMMANDS`.
USER_ADVICE = (
    "your kubeconfig's user needs this right, not the operator's ServiceAccount: have it "
    "granted (`kubectl auth can-i --list -n NAMESPACE` shows yours)"
)


def _command_modules() -> list[ModuleType]:
    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "COMMAND"):
            modules.append(module)
    for entry in sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name
    ):
        plugin = entry.load()
        if isinstance(plugin, ModuleType) and hasattr(plugin, "COMMAND"):
            modules.append(plugin)
    return modules


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a mistake reported in one line that says what to change.

    argparse prints the whole usage first, which for ``ehb consume`` is a screenful that
    hides the one line that matters; ``--help`` still shows it.

    A flag is taken only as spelt out: argparse would take ``--to-l`` for ``--to-latest`` and
    ``--part`` for ``--partitions``, and a command that moves checkpoints or replays events
    must not act on a guess (kubectl takes no abbreviations either). A prefix is refused with
    the nearest flag named (`main`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _log_format(raw: str) -> str:
    """``--log-format``'s type, which argparse applies to the variable's default too."""
    if raw not in logformats.FORMATS:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is not one of {', '.join(logformats.FORMATS)} (from the flag or env "
            f"{ENV_LOG_FORMAT})"
        )
    return raw


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="ehb",
        description="eventhub-balancer: central partition balancing for Azure Event Hubs "
        "on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)"
    )
    parser.add_argument(
        "--log-format",
        # A type, not choices: argparse checks choices only on the command line, and an
        # EHB_LOG_FORMAT of "JSON" or "yaml" gave text logs without a word.
        type=_log_format,
        metavar="{" + ",".join(logformats.FORMATS) + "}",
        default=os.environ.get(ENV_LOG_FORMAT) or logformats.TEXT,
        help="text lines, or one JSON object per line with consumer, namespace, pod and "
        f"partition fields (env {ENV_LOG_FORMAT}; default text)",
    )
    groups: dict[tuple[str, ...], argparse._SubParsersAction[ArgumentParser]] = {}
    groups[()] = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups[()].required = True
    modules = sorted(_command_modules(), key=lambda m: len(m.COMMAND))
    for module in modules:
        path = tuple(module.COMMAND)
        for depth in range(1, len(path)):
            prefix = path[:depth]
            if prefix not in groups:
                line = group_help(prefix, modules)
                group = groups[prefix[:-1]].add_parser(prefix[-1], help=line, description=line)
                groups[prefix] = group.add_subparsers(dest="_".join(prefix), metavar="COMMAND")
                groups[prefix].required = True
        sub = groups[path[:-1]].add_parser(
            path[-1], help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP)
        )
        module.add_arguments(sub)
        sub.set_defaults(
            _run=module.run, _log_identity=getattr(module, "log_identity", None), _parser=sub
        )
        _own_parsers(sub)
    return parser


def group_help(prefix: tuple[str, ...], modules: Sequence[ModuleType]) -> str:
    """The line a group of commands (``ehb checkpoints``) gets in the help above it: the
    ``GROUP_HELP`` one of its commands declares, or else the names of its commands."""
    children = [m for m in modules if tuple(m.COMMAND[:-1]) == prefix]
    for module in children:
        if getattr(module, "GROUP_HELP", None):
            return str(module.GROUP_HELP)
    return "commands: " + ", ".join(sorted(m.COMMAND[-1] for m in children))


def _own_parsers(parser: argparse.ArgumentParser) -> None:
    """The actions a command adds below itself (``ehb deadletters list``) are each the parser
    that refuses their unknown flags: their own --help lists the flags the user meant."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.set_defaults(_parser=child)
                _own_parsers(child)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    unknown = _take_trailing(args, unknown)
    if unknown:
        # Refused by the command's own parser, not the top-level one: its --help lists the
        # flags the user meant, and the nearest of them is said.
        command = cast(ArgumentParser, args._parser)
        command.error(f"unrecognized arguments: {' '.join(unknown)}{_nearest(command, unknown)}")
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    run = cast(Callable[[argparse.Namespace], int], args._run)
    try:
        identity = args._log_identity(args) if args._log_identity is not None else None
        logformats.configure(level=level, log_format=args.log_format, identity=identity)
        return run(args)
    except errors.InvalidInput as e:
        print(f"ehb: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except errors.EventHubBalancerError as e:
        advice = USER_ADVICE if args.command in USER_COMMANDS else OPERATOR_ADVICE
        print(f"ehb: error: {str(e).replace(OPERATOR_ADVICE, advice)}", file=sys.stderr)
        return EXIT_UNAVAILABLE if isinstance(e, errors.TransientError) else 1
    except yaml.YAMLError as e:
        # A YAML file the user gave (a kubeconfig, a values or scenario file) is broken: say
        # where, in one line, rather than the parser's stack; the kubeconfig as when its
        # context's namespace is read (`kubecontexts`), naming the flag.
        kubeconfig = kubecontexts.kubeconfig_of(e, getattr(args, "kubeconfig", None))
        problem = kubeconfig or f"a YAML file cannot be read: {_one_line(e)}"
        print(f"ehb: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ehb ... | head` closed our stdout: not an error, and no traceback. Point stdout at
        # /dev/null so that the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _take_trailing(args: argparse.Namespace, unknown: list[str]) -> list[str]:
    """What is left unknown once a command's list of positionals (``BLOB ...``, named by its
    ``_trailing`` default) took the words given after its flags: argparse fills the list from
    the words right after the command's first positional only, and leaves the rest unknown
    (``replay orders --to-hub 0/5-6``). Words after ``--`` and flags stay unknown."""
    dest = getattr(args, "_trailing", None)
    if dest is None or "--" in unknown:
        return unknown
    words = [word for word in unknown if not word.startswith("-")]
    if len(words) < len(unknown):
        return unknown  # an unknown flag: its value may be among the words; refuse them all
    getattr(args, dest).extend(words)
    return []


def _nearest(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """`` (did you mean --namespace?)`` for the first misspelt long flag, else nothing; for a
    flag cut short (``--part``), the flags it begins, which must be spelt out."""
    flags = [flag for action in parser._actions for flag in action.option_strings]
    for word in unknown:
        if word.startswith("--"):
            given = word.split("=", 1)[0]
            longer = [flag for flag in flags if flag.startswith(given)]
            if longer:
                return f" (did you mean {' or '.join(longer)}? flags are taken only spelt out)"
            close = difflib.get_close_matches(given, flags, n=1, cutoff=0.75)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


def _one_line(error: yaml.YAMLError) -> str:
    """The parser's problem and where it is (``file, line L, column C``)."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}: {error.problem}"
    return " ".join(str(error).split())
