"""What runs on this machine, read from /proc: for tests that check a command leaves no
process behind (Linux)."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def children(pid: int) -> dict[int, str]:
    """The live processes whose parent is ``pid``, with their command lines."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[1]) == pid:
            found[int(stat.parent.name)] = cmdline
    return found
