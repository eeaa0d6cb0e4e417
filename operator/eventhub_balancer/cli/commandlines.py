"""The command that finishes what a command stopped part-way: the same flags, other names.

A replay or a reset that a dependency stopped names the command that finishes it. That command
must act as the first one did (the same namespace, kubeconfig, target, handler and identity),
or it does something else or is refused: ``ehb deadletters replay orders 0/7-7`` without the
``--through-handler`` given is refused, and one without the ``--kubeconfig`` given reads
another cluster. So the line is rebuilt from the flags the command was given, as its parser
declares them, with the namespace spelt out. A secret given as a flag (a connection string) is
not printed: the line says which variable to set to it instead.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Collection, Mapping, Sequence

from eventhub_balancer.cli import consumertargets
from eventhub_balancer.contracts import connectionstrings

#: The flags whose value is a secret, and the variable each command reads it from when the
#: flag is absent.
SECRETS: Mapping[str, str] = {
    "connection_string": connectionstrings.ENV_BLOB_CONNECTION_STRING,
    "eventhub_connection_string": connectionstrings.ENV_EVENTHUB_CONNECTION_STRING,
}


def again(
    args: argparse.Namespace,
    command: Sequence[str],
    *,
    names: Sequence[str],
    drop: Collection[str] = (),
    flags: Sequence[str] = (),
) -> str:
    """``ehb COMMAND NAME -n NS`` with the flags ``args`` was given, except those whose
    destination is in ``drop``, then ``flags``, then ``names``; backquoted, with what to set
    for each secret left out."""
    parser: argparse.ArgumentParser = args._parser
    words = ["ehb", *command, args.name, "-n", consumertargets.consumer_namespace(args)]
    unset = []
    for action in parser._actions:
        if not action.option_strings or action.dest in {"help", "namespace", *drop}:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if action.dest in SECRETS:
            unset.append(f"{SECRETS[action.dest]} set to the {flag} given (not printed)")
        elif action.nargs == 0:  # a switch: --to-hub, --force
            words.append(flag)
        elif isinstance(value, list):  # repeatable: --handler-path, --bind-location
            for item in value:
                words += [flag, str(item)]
        else:
            words += [flag, str(value)]
    line = f"`{shlex.join([*words, *flags, *names])}`"
    return f"{line} with {' and '.join(unset)}" if unset else line
