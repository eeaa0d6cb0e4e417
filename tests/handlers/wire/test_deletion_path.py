"""The files one pod deletion visits, from its watch event to the first ConfigMap write.

The operator runs on the local API server as in the other wire tests. Once it is steady, a pod
is deleted, and a tracer on the operator's thread records every function and line of the
product that runs from the moment the pod's DELETED event reaches the operator's handler
(`kopfwiring`'s ``pod_changed``) until the first ConfigMap write leaves the Kubernetes
adapter. Calls of the tasks that run beside the path (`BESIDE`), and of loop callbacks that
run outside every task, are left out.

This is the measure of issue 38's target ("following one pod deletion visits at most 15
files", counted over ``handlers/`` and ``reconciling/``, as that issue counted them). Run with
``-s`` to see the files, and how many of their lines the deletion runs; the test fails when
the path grows beyond what it visits today, in files or in the lines it runs, so a change that
lengthens it says so.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import eventhub_balancer
from eventhub_balancer_devstack.azurite import Azurite
from tests.support.fixtures.azurite import ensure_named_container
from tests.support.fixtures.operator import ConsumerDouble, Stack, wait_for

pytestmark = pytest.mark.slow

PACKAGE = "/eventhub_balancer/"
WRITES = frozenset(
    {"create_configmap", "patch_configmap", "replace_configmap_data", "delete_configmap"}
)
#: The tasks that run beside the path, not on it: kopf's watchers (each reads its stream
#: through `kopfwatches`; the DELETED event is in the pods' worker before the path starts),
#: the other watch streams' workers, the Events poster, the pods' re-listing and the growth
#: watch.
BESIDE = (
    "watcher for ",
    "worker for (configmaps",
    "worker for (eventhub",
    "ehb-event-posts",
    "ehb-relisting",
    "ehb-growth",
)
#: The container the consumer's checkpoint store names (`clusters.LocalCluster.consumer`).
CHECKPOINTS = "checkpoints"
#: The shell and the decision, as issue 38 counts the path.
COUNTED = ("handlers/", "reconciling/")
#: What the path visits today (handlers/ and reconciling/): it must not grow unnoticed.
#: With a checkpoint store that answers: 25 (`reconciling/silentowners` runs only then); the
#: 24 measured until 7 December were those of a consumer whose store could not be read.
CEILING = 25
#: The lines of those files a deletion runs: 1,709 to 1,729 in six runs on 7 December once the
#: store answers (the cycle reads the blobs to give the partitions out); before, with a store that
#: could not be read: 1,632 to 1,652 in six runs later on 7 December, since
#: a decision looks its peers up in an index (`conflicts.PeerIndex.at` and `.selecting`, about 6
#: lines) instead of passing over them all; 1,634 to 1,644 in four runs on 7 December, since every
#: decision asks whether a pod tells of a batch set aside into the dead letters (3 lines of
#: `deciding`; `setasides` itself runs only when one does); 1,636 to 1,641 in five runs on 6
#: December, since the Events of partitions in trouble are derived only when a trouble is reported
#: now or was in the previous status (`troubleevents`: 16 lines fewer); 1,648 to 1,658 in eight runs
#: before, in the session before, since the cache tells a pod relabelled out of the selector from
#: one deleted (4 lines: `shelves.Shelf`, `serving.CachedKube.departures`) and the Events name it
#: and tell a scale to zero from partitions stranded (3 lines: `kubeevents`; 1,664 once while one
#: more ran on every deletion). 1,648 to 1,653 in ten runs at the end of 6 December, since Event
#: Hubs' backoff reads the status's count of partitions in trouble (5 lines:
#: `observing.failing_count`); 1,629 to 1,648 in five runs before, since the store's backoff asks
#: whether the pods report fewer of them (2 lines: `checkpointreads.read_store`); 1,627 to 1,646 in
#: five runs later on 6 December, since the planner is told which ownerless partitions no pod's
#: ConfigMap names (4 lines: `fleets.Fleet.idle`) and when the starting pods stop counting
#: (`deadlines`, 1 line); 1,636 to 1,641 in five runs just before, on the same machine; 1,622 to
#: 1,636 in four runs earlier on 6 December, since Balanced names the NotReady pods that hold
#: nothing (3 lines: 1,619 to 1,633 just before); 1,629 to 1,634 in three runs earlier that day,
#: since every cycle asks whether a trouble is news or joins one its pod already had (1,616 to 1,630
#: before; 1,604 to 1,623 before the reads were handed the operator's lines for the faults many
#: consumers meet together, `dependencylines`; 1,561 to 1,575 before the rules for skewed clocks,
#: lost nodes, consumers scaled to zero, lost checkpoint blobs and the autoscaler's figure in
#: faults, which every decision checks, and 1,589 to 1,591 before the check of a status restored
#: from a backup and the messages naming the refusal). A run may take a branch more or less (a
#: re-list or an echo falling on the path: 11 lines of the cache's shelves alone), so the bound
#: leaves that much room above the most seen, and no more. Merging modules cannot hide growth from
#: this bound, as it can from the file count.
LINES_CEILING = 1_740


class PathTrace:
    """A tracer for the operator's thread: the product's files in the order first entered,
    each with the functions it ran and the lines it ran."""

    def __init__(self, victim: str) -> None:
        self.victim = victim
        self.armed = False
        self.started = False
        self.done = threading.Event()
        self.files: dict[str, list[str]] = {}
        self.lines: dict[str, set[int]] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or self.done.is_set() or not self.armed:
            return None
        path = frame.f_code.co_filename
        if PACKAGE not in path or "eventhub_balancer_devstack" in path:
            return None
        name = frame.f_code.co_name
        if not self.started:
            kwargs = frame.f_locals.get("kwargs") or {}
            if name == "pod_changed" and kwargs.get("type") == "DELETED":
                self.started = kwargs.get("name") == self.victim
            if not self.started:
                return None
        task = _task_name()
        # Outside every task runs a loop callback, such as the done callback of a task beside
        # the path (a growth listing ending): the path's steps all run in the pod watch's
        # worker and the consumer's daemon.
        if task is None or task.startswith(BESIDE):
            return None
        relative = path.split(PACKAGE, 1)[1]
        self.files.setdefault(relative, []).append(name)
        ran = self.lines.setdefault(relative, set())
        ran.add(frame.f_code.co_firstlineno)
        if name in WRITES and relative == "adapters/kubeapi.py":
            self.done.set()

        def line(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line" and not self.done.is_set():
                ran.add(frame.f_lineno)
            return line

        return line


def _task_name() -> str | None:
    """The running task's name; None outside every task (or outside a running loop)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    return task.get_name() if task is not None else None


def test_a_pod_deletion_reaches_the_configmap_write_through_few_files(
    operator_stack: Stack, namespace: str, azurite: Azurite
) -> None:
    stack, ns = operator_stack, namespace
    stack.secret(ns)
    # A checkpoint store that answers, as a user's does. Without one its reads failed and were
    # tried again on a backoff, and a retry that came due just then put the failure's path on
    # the deletion's (seen once in CI, on a slow machine); the path measured was also not a
    # user's: the deletion's cycle reads the blobs to give the partitions out.
    ensure_named_container(azurite.connection_string, CHECKPOINTS)
    stack.secret(ns, name="blob", value=azurite.connection_string)
    stack.consumer(ns)
    for i in range(4):
        stack.pod(ns, f"c-{i}")
    trace = PathTrace("c-3")
    threading.settrace(trace)  # the operator's thread, started next, runs under it
    try:
        # The hub is listed afresh only once a minute: no listing falls on the path by chance.
        stack.start_operator(namespaces=(ns,), refresh_seconds=60.0)
    finally:
        threading.settrace(None)
    with ConsumerDouble(stack.kube, ns):
        wait_for(lambda: sorted(stack.counts(ns).values()) == [8] * 4, what="4 x 8")
        wait_for(lambda: stack.balanced(ns), what="balanced")
        time.sleep(1.0)  # steady: nothing in flight
        trace.armed = True
        stack.delete_pod(ns, "c-3")
        assert trace.done.wait(15.0), "no ConfigMap write after the deletion"
    counted = [f for f in trace.files if f.startswith(COUNTED)]
    root = Path(eventhub_balancer.__file__).parent
    held = sum(len((root / f).read_text().splitlines()) for f in counted)
    ran = sum(len(trace.lines[f]) for f in counted)
    print(f"\n{len(trace.files)} product files, {len(counted)} of handlers/ and reconciling/")
    print(f"(the deletion ran {ran} of the {held} lines those {len(counted)} hold):")
    for path, names in trace.files.items():
        size = len((root / path).read_text().splitlines())
        print(f"  {path} ({len(trace.lines[path])} of {size}): {', '.join(dict.fromkeys(names))}")
    assert trace.files, "the trace saw nothing"
    assert "handlers/kopfwiring.py" in trace.files
    assert len(counted) <= CEILING, counted
    assert ran <= LINES_CEILING, f"the deletion ran {ran} lines"
