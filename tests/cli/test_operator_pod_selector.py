"""``ehb operator --pod-selector``: the pods the operator watches at all; a mistake is said
before anything connects, with what to write."""

from __future__ import annotations

import subprocess
import sys

from eventhub_balancer.cli import operator_cmd
from tests.cli.test_operator_tenancy_flags import parsed


def test_the_pod_selector_scopes_the_operator_and_none_means_every_pod() -> None:
    scope = operator_cmd.pod_scope(
        parsed("--pod-selector", "app.kubernetes.io/part-of=eventhub-balancer,!legacy")
    )
    assert scope is not None
    assert scope.to_query() == "app.kubernetes.io/part-of=eventhub-balancer,!legacy"
    assert operator_cmd.pod_scope(parsed()) is None
    assert operator_cmd.pod_scope(parsed("--pod-selector", " ")) is None


def test_a_malformed_pod_selector_stops_the_operator_before_it_connects() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventhub_balancer",
            "operator",
            "-A",
            "--pod-selector",
            "tier in (a",
            # Never read: the flag is refused first.
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--pod-selector: 'tier in (a': unbalanced parentheses" in done.stderr
    assert "kubeconfig" not in done.stderr
