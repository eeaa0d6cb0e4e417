"""``ehb local up`` says how to reach each service it started, a line per hub among them.

``--hub x=1`` read ``hub x: 1 partitions``: the count of each hub's partitions agrees with it.
"""

from __future__ import annotations

import pytest

from eventhub_balancer_devstack import stacks


def test_each_hub_is_described_with_its_partitions_in_the_singular_or_plural(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = stacks.LocalStack(stacks.StackOptions(hubs={"x": 1, "y": 4}))
    # Not started: the API's address is only known once it runs.
    monkeypatch.setattr(type(stack.kube), "url", "http://127.0.0.1:8001")
    hubs = [line for line in stack.describe() if line.startswith("  hub ")]
    assert hubs == ["  hub x: 1 partition", "  hub y: 4 partitions"]
