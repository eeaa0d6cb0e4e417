"""A product flag that names an address or a folder refuses ``''``, which names neither.

``''`` is what an unset variable expanded in a flag gives (``--host "$HOST"``). Taken as given,
``ehb consume --host ''`` listened on every address, ``--crash-marker-dir ''`` noted handler
calls in the working directory, which no restart keeps, and ``ehb operator
--metrics-cert-dir ''`` served a self-signed certificate in place of the one meant. This walks
the product's commands, so a new such flag without the check fails here.
"""

from __future__ import annotations

import argparse

import pytest

from eventhub_balancer import cli
from tests.cli.test_number_flags import flags

#: The product's commands (the development stack's are not installed on a cluster).
PRODUCT = ("consume ", "operator ")
#: What names an address or a folder to serve or keep something in.
NAMED = ("host", "-dir")


def address_and_folder_flags() -> dict[str, argparse.Action]:
    return {
        name: action
        for name, action in flags(cli.build_parser())
        if name.startswith(PRODUCT) and name.endswith(NAMED)
    }


def test_the_walk_finds_the_address_and_folder_flags() -> None:
    assert set(address_and_folder_flags()) == {
        "consume --host",
        "consume --crash-marker-dir",
        "operator --metrics-host",
        "operator --metrics-cert-dir",
    }


@pytest.mark.parametrize("raw", ["", " "])
def test_each_refuses_a_value_that_names_nothing(raw: str) -> None:
    for name, action in address_and_folder_flags().items():
        with pytest.raises(argparse.ArgumentTypeError, match="an unset variable") as refused:
            action.type(raw)  # type: ignore[misc,operator]
        assert str(refused.value).startswith(f"{raw!r} is not "), name


def test_each_takes_a_value_that_names_something() -> None:
    taken = {
        name: str(action.type(value))  # type: ignore[misc,operator]
        for name, action in address_and_folder_flags().items()
        for value in (("127.0.0.1",) if name.endswith("host") else ("/var/run/ehb",))
    }
    assert set(taken.values()) == {"127.0.0.1", "/var/run/ehb"}


def test_an_empty_host_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """As every other variable of ``ehb consume``: it listened on every address, v6 too."""
    monkeypatch.setenv("EHB_HOST", "")
    args = cli.build_parser().parse_args(["consume", "--handler", "m:f"])
    assert args.host == "0.0.0.0"
