"""docs/first-consumer.md's walkthrough on this machine, command by command, as it is written.

The page's two marked blocks are read from the page itself: the stack's command runs in the
background (a user's first terminal), then each command of the second block runs in one
shell (the second terminal), from a folder that holds the repository's charts and examples as
the repository does. The consumer then reports 32 partitions, balanced and ready, as the page
says it will (the stack's default hub has 32).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import paths

PAGE = paths.REPOSITORY / "docs" / "first-consumer.md"
BLOCK = re.compile(r"<!-- walkthrough: (?P<name>\w+) -->\n```sh\n(?P<body>.*?)```", re.DOTALL)
#: The stack starts in 10-20 s here; the commands wait up to 180 s for the consumer.
START_S = 120.0
COMMANDS_S = 300.0
#: The pods take the orders up within a second or two of the send.
PROCESS_S = 60.0
SELECTOR = "app.kubernetes.io/instance=orders"
#: The example handler's line per batch: ``partition 2: 10 orders (sequence numbers 0-9, ...``.
ORDERS_LOGGED = re.compile(r"partition \d+: (\d+) orders? \(sequence numbers")


def blocks() -> dict[str, list[str]]:
    found = {m["name"]: m["body"].strip().splitlines() for m in BLOCK.finditer(PAGE.read_text())}
    assert set(found) == {"stack", "commands"}, found
    return found


def run(argv: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A command of the second terminal, in ``folder``, its output kept."""
    return subprocess.run(
        argv, cwd=folder, env=env, capture_output=True, text=True, timeout=COMMANDS_S, check=False
    )


def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    page = blocks()
    for folder in ("charts", "examples", "crds"):
        (tmp_path / folder).symlink_to(paths.REPOSITORY / folder)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
    }
    env.pop("KUBECONFIG", None)
    (stack_command,) = page["stack"]
    stack = subprocess.Popen(
        ["bash", "-c", f"exec {stack_command}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert stack.stdout is not None
        printed: list[str] = []
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            line = stack.stdout.readline()
            if not line:
                break
            printed.append(line.rstrip())
            if line.startswith("Ctrl-C"):
                break
        text = "\n".join(printed)
        assert printed, stack.stderr.read() if stack.stderr else ""
        assert printed[-1].startswith("Ctrl-C"), text
        assert "Consumer shop/orders: Secrets orders-eh and orders-blob" in text
        assert "ehb operator --namespace shop" in text
        done = run(["bash", "-euo", "pipefail", "-c", "\n".join(page["commands"])], tmp_path, env)
        assert done.returncode == 0, done.stdout + done.stderr
        table = [
            line.split() for line in done.stdout.splitlines() if "orders-eventhub-consumer" in line
        ]
        # NAME PARTITIONS PODS FAILING BALANCED READY REASON AGE
        assert ["orders-eventhub-consumer", "32", "2", "0", "True", "True"] in [
            row[:6] for row in table
        ], done.stdout
        assert "32 partitions, 2 members" in done.stdout
        assert "sent 320 events to hub 'orders', partitions 0-31" in done.stdout
        # The pods process what was sent, and kubectl logs (the local node's) shows it.
        env["KUBECONFIG"] = str(tmp_path / ".ehb" / "kubeconfig")
        logged = 0
        deadline = time.monotonic() + PROCESS_S
        while time.monotonic() < deadline:
            shown = run(
                ["kubectl", "-n", "shop", "logs", "-l", SELECTOR, "--tail=-1"], tmp_path, env
            )
            logged = sum(int(n) for n in ORDERS_LOGGED.findall(shown.stdout))
            if logged >= 320:
                break
            time.sleep(1.0)
        assert logged == 320, shown.stdout[-2000:] + shown.stderr
    finally:
        stack.send_signal(signal.SIGTERM)
        stack.wait(timeout=60)
