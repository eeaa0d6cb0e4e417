"""Where the tests find the repository's files, computed once instead of by counting parents."""

from __future__ import annotations

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
CRDS = REPOSITORY / "crds"
EXAMPLES = REPOSITORY / "examples"
#: One readable planner scenario per rule, each beside its expected output.
SCENARIOS = REPOSITORY / "tests" / "planner" / "scenarios"
#: Handler modules for consumer processes (``--handler recording:handle`` with this folder on
#: the ``PYTHONPATH``).
HANDLERS = Path(__file__).resolve().parent / "handlers"
