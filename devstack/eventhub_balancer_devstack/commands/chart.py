"""`ehb chart sync-crds`: generate the Helm chart's crds/ from the repository's crds/.

The CRD YAML has one source, ``crds/``; Helm installs CRDs only from a chart's own ``crds/``
folder, so the chart carries a copy. This command writes that copy (byte for byte, and removes
files that no longer have a source), and with ``--check`` only reports drift, for CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from eventhub_balancer import errors

COMMAND = ("chart", "sync-crds")
HELP = "copy crds/*.yaml into charts/eventhub-balancer/crds/ (--check: only report drift)"
#: The group's line in ``ehb --help`` (this is its only command).
GROUP_HELP = "keep the Helm chart's CRDs in step with crds/"

#: Where the sources and the chart live, relative to the repository root.
SOURCE_DIR = Path("crds")
CHART_CRDS_DIR = Path("charts") / "eventhub-balancer" / "crds"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Drift:
    """What differs between the sources and the chart's copy (file names, sorted)."""

    missing: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.missing or self.changed or self.extra)

    def describe(self) -> str:
        parts = [
            f"{label}: {', '.join(names)}"
            for label, names in (
                ("missing", self.missing),
                ("changed", self.changed),
                ("extra", self.extra),
            )
            if names
        ]
        return "; ".join(parts)


def _yaml_files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.suffix in (".yaml", ".yml")
    }


def _sources(root: Path) -> dict[str, bytes]:
    source_dir = root / SOURCE_DIR
    if not source_dir.is_dir():
        raise errors.InvalidInput(
            "--root", f"{root} has no {SOURCE_DIR}/ folder: give the repository root"
        )
    if not (root / CHART_CRDS_DIR).parent.is_dir():
        raise errors.InvalidInput("--root", f"{root} has no {CHART_CRDS_DIR.parent}/ chart")
    sources = _yaml_files(source_dir)
    if not sources:
        raise errors.InvalidInput("--root", f"{source_dir} holds no *.yaml CRD")
    return sources


def drift(root: Path) -> Drift:
    """Compare the chart's crds/ with the sources."""
    sources = _sources(root)
    copies = _yaml_files(root / CHART_CRDS_DIR)
    return Drift(
        missing=tuple(sorted(set(sources) - set(copies))),
        changed=tuple(sorted(n for n in set(sources) & set(copies) if sources[n] != copies[n])),
        extra=tuple(sorted(set(copies) - set(sources))),
    )


def sync(root: Path) -> Drift:
    """Make the chart's crds/ equal to the sources; returns what had to change."""
    found = drift(root)
    target = root / CHART_CRDS_DIR
    target.mkdir(exist_ok=True)
    sources = _sources(root)
    for name in (*found.missing, *found.changed):
        (target / name).write_bytes(sources[name])
    for name in found.extra:
        (target / name).unlink()
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=Path.cwd(),
        help="the repository root (default: the current directory)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the chart's copy differs from crds/",
    )


def run(args: argparse.Namespace) -> int:
    root: Path = args.root
    if args.check:
        found = drift(root)
        if found:
            print(
                f"ehb: {CHART_CRDS_DIR} is out of date ({found.describe()}): "
                "run `ehb chart sync-crds`",
                file=sys.stderr,
            )
            return 1
        return 0
    found = sync(root)
    print(f"{CHART_CRDS_DIR}: {found.describe() if found else 'up to date'}")
    return 0
