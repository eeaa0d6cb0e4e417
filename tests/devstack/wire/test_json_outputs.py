"""Every ``--json`` command prints exactly one JSON document on stdout, logs elsewhere.

Scripts and ``ehb bench record`` parse that stdout; a log line before the document (a Java
warning of Spark's, a kopf message) breaks them. Each command runs as a user runs it, in a
process of its own, with the smallest settings it allows; stdout must parse as it is.
``COMMANDS`` and ``ELSEWHERE`` name every command that has ``--json`` (a test checks that
none is missing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventhub_balancer_devstack import azurite as azurite_launcher
from tests.support.fixtures.azurite import ensure_named_container

CONTAINER = "json-outputs"
#: Each ``--json`` command with its smallest settings; ``{kubeconfig}`` and ``{blob}`` are
#: filled in by the test (a local API server, Azurite).
COMMANDS: dict[str, list[str]] = {
    "plan": ["plan", "--json", "--partitions", "3", "--pods", "2"],
    "status": ["status", "--json", "-n", "nobody", "--kubeconfig", "{kubeconfig}"],
    "checkpoints list": [
        "checkpoints",
        "list",
        "--json",
        "--connection-string",
        "{blob}",
        "--container",
        CONTAINER,
        "--eventhub-namespace",
        "shop.servicebus.windows.net",
        "--hub",
        "orders",
    ],
    "bench planner": ["bench", "planner", "--json", "--repeat", "1"],
    "bench decide": [
        "bench",
        "decide",
        "--json",
        "--repeat",
        "1",
        "--partitions",
        "4",
        "--pods",
        "2",
    ],
    "bench operator": [
        "bench",
        "operator",
        "--json",
        "--partitions",
        "3",
        "--pods",
        "2",
        "--rounds",
        "1",
        "--interval",
        "1",
        "--steady-cycles",
        "1",
        # Other workloads' pods beside the consumers, and an operator that watches only the
        # consumer pods: the flags of a shared namespace, at a size that costs seconds.
        "--other-pods",
        "20",
        "--pod-selector",
        "app.kubernetes.io/part-of=eventhub-balancer",
    ],
    "bench lag": [
        "bench",
        "lag",
        "--json",
        "--partitions",
        "3",
        "--pods",
        "2",
        "--rounds",
        "1",
        "--interval",
        "1",
    ],
    "bench checkpoints": ["bench", "checkpoints", "--json", "--updates", "1", "--partitions", "1"],
    "bench emulator": ["bench", "emulator", "--json", "--events", "10", "--partitions", "1"],
    "bench consumer": [
        "bench",
        "consumer",
        "--json",
        # One event in batches of one: every batch is full, so no drain waits out the
        # runtime's max wait for a last, partial batch (Spark's session is still started).
        "--events",
        "1",
        "--partitions",
        "1",
        "--rounds",
        "1",
        "--batch-size",
        "1",
    ],
    "bench chaos": ["bench", "chaos", "--json", "--seconds", "1"],
    "bench soak": [
        "bench",
        "soak",
        "--json",
        "--seconds",
        "2",
        "--rate",
        "20",
        "--partitions",
        "1",
        "--sample-seconds",
        "1",
    ],
}
#: The commands whose run takes minutes even at their smallest settings: their own tests run
#: them with ``--json`` and parse the whole of stdout already (checked below), so they are not
#: run twice.
ELSEWHERE: dict[str, str] = {
    "bench balance": "tests/devstack/wire/demo/test_bench_balance.py",
    "checkpoints import": "tests/adapters/wire/test_checkpoint_reset.py",
    "checkpoints reset": "tests/adapters/wire/test_checkpoint_reset.py",
    "deadletters": "tests/adapters/wire/test_deadletter_replay.py",
    "demo": "tests/devstack/wire/demo/test_demo.py",
}
#: The longest any one of them may take.
TIMEOUT = 120.0
ROOT = Path(__file__).resolve().parents[3]


def json_commands() -> set[str]:
    """The commands whose module takes ``--json``, found in the sources."""
    found = set()
    for folder in (
        "operator/eventhub_balancer/cli",
        "devstack/eventhub_balancer_devstack/commands",
    ):
        for path in (ROOT / folder).glob("*.py"):
            text = path.read_text()
            if '"--json"' not in text:
                continue
            namespace: dict[str, object] = {}
            line = next(x for x in text.splitlines() if x.startswith("COMMAND = "))
            exec(line, namespace)  # a literal tuple of words
            found.add(" ".join(namespace["COMMAND"]))  # type: ignore[arg-type]
    return found


def test_every_json_command_is_run_here_or_named_elsewhere() -> None:
    assert set(COMMANDS) | set(ELSEWHERE) == json_commands()
    assert not set(COMMANDS) & set(ELSEWHERE)


@pytest.mark.parametrize("name", sorted(ELSEWHERE))
def test_the_tests_elsewhere_run_the_command_and_parse_all_of_stdout(name: str) -> None:
    text = (ROOT / ELSEWHERE[name]).read_text()
    words = ", ".join(f'"{word}"' for word in name.split())
    assert words in text
    assert '"--json"' in text
    assert "json.loads(done.stdout)" in text or "json.loads(stdout)" in text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_stdout_is_exactly_one_json_document(
    name: str, kubeconfig: Path, azurite: azurite_launcher.Azurite, tmp_path: Path
) -> None:
    args = [a.format(kubeconfig=kubeconfig, blob=azurite.connection_string) for a in COMMANDS[name]]
    if name == "checkpoints list":  # an empty container: the listing is []
        ensure_named_container(azurite.connection_string, CONTAINER)
    ehb = Path(sys.executable).with_name("ehb")
    completed = subprocess.run(
        [str(ehb), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        check=False,
    )
    if name == "bench lag":  # exits 1 when a round is over its target, with the figures
        document = json.loads(completed.stdout)
        assert completed.returncode == (0 if document["ok"] else 1), completed.stderr[-2000:]
        # The lag took effect: the API server held watch events back. (That the operator
        # finds a deletion behind it is held on fake time: tests/handlers/test_selfhealing.py.)
        assert len(document["rounds_s"]) == 1, document
        assert document["watch_fault_effects"]["delayed"] > 0, document
        return
    assert completed.returncode == 0, completed.stderr[-2000:]
    document = json.loads(completed.stdout)  # the whole of stdout, nothing before or after
    if name == "bench operator":
        # Counted at the API server, not timed: a steady cycle costs it nothing.
        assert document["steady_state_requests_per_cycle"] == 0, document
        assert document["steady_state_writes_per_cycle"] == 0, document
        assert document["operator_rss_mb"] > 0, document
        assert document["steady_cpu_cores"] > 0, document
        # Balanced with the selector, and the other pods were there, each several kB.
        assert document["pod_selector"] == "app.kubernetes.io/part-of=eventhub-balancer"
        assert document["other_pods"] == 20, document
        assert document["other_pod_bytes"] > 5_000, document
        assert document["pods_list_bytes"] > 20 * document["other_pod_bytes"], document
        # Reported, not judged: how fast is the benchmark's figure, not this test's.
        assert isinstance(document["first_balance_s"], float), document
        assert document["operator_peak_rss_mb"] >= document["operator_rss_mb"], document
        assert document["relist_peak_rss_mb"] >= document["operator_peak_rss_mb"], document
    if name == "bench consumer":
        # Spark mode ran too: its JVM, which shares the command's stdout, was started.
        assert document["spark_session_start_s"] is not None, document
        assert document["spark_events_per_s"] is not None, document
    if name == "bench soak":
        # Every event sent was processed once, and the consumer's process tree was sampled.
        assert (document["lost"], document["duplicates"]) == (0, 0), document
        assert document["processed"] == document["sent"] > 0, document
        assert min(document["samples"]["rss_mb"]) > 0, document
