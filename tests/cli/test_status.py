"""``ehb status``'s table, and its hint when no operator serves the consumer's namespace."""

from __future__ import annotations

from typing import Any

from eventhub_balancer.cli import status, tables


def consumer(generation: int = 1, **status_fields: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "shop", "name": "orders", "generation": generation},
        "status": status_fields,
    }


def test_no_status_says_which_operator_is_missing_instead_of_question_marks() -> None:
    shown = status.render(consumer())
    assert "? partitions" not in shown
    assert shown.startswith("shop/orders: no status yet: no operator has reconciled it; ")
    assert "is an operator running that serves namespace shop?" in shown
    assert "ehb operator -n shop" in shown


def test_a_status_of_an_older_generation_is_said_above_the_table() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "AllPartitionsOwned", "message": "ok"}
    shown = status.render(
        consumer(generation=3, observedGeneration=2, partitionCount=4, conditions=[ready])
    ).splitlines()
    assert shown[0].startswith("shop/orders: the status is of generation 2, the spec is at 3")
    assert shown[1].startswith("shop/orders: 4 partitions, ")


def test_a_current_status_has_no_hint() -> None:
    shown = status.render(
        consumer(observedGeneration=1, partitionCount=4, memberCount=2, movesTotal=4)
    )
    assert (
        shown.splitlines()[0]
        == "shop/orders: 4 partitions, 2 members, 4 moves since it was created"
    )
    assert status.unserved(consumer(observedGeneration=1)) is None


def test_a_pod_of_many_partitions_is_one_readable_row() -> None:
    """Partitions in numeric runs, an epoch per run: 1,024 partitions over 4 pods listed every
    partition and every epoch, rows of about 2,000 characters."""
    pods = [
        {
            "pod": f"orders-{i}",
            "ready": True,
            "state": "ready",
            "partitions": [str(p) for p in range(256 * i, 256 * (i + 1))],
        }
        for i in range(4)
    ]
    epochs = {str(p): 1 for p in range(1024)}
    shown = status.render(
        consumer(observedGeneration=1, partitionCount=1024, consumers=pods, epochs=epochs)
    ).splitlines()
    assert max(len(line) for line in shown) <= 100
    assert shown[-4].split() == ["orders-0", "yes", "ready", "0-255", "1", "-"]


def test_a_pod_at_several_epochs_reads_its_partitions_whole_and_each_epoch_with_its_own() -> None:
    """PARTITIONS broke its runs where the epoch changed, one epoch a run: a pod that took
    partitions in three moves read ``0,11-12,24-26,27-29,30-31`` beside ``2,3,4,3,4``, as if
    scattered. PARTITIONS is what the pod holds; EPOCHS names each epoch's partitions."""
    pod = {
        "pod": "orders-0",
        "ready": True,
        "state": "ready",
        "partitions": ["3", "0", "1", "2", "10", "11"],
        "revoking": ["11", "10"],
    }
    shown = status.render(
        consumer(
            observedGeneration=1,
            partitionCount=12,
            consumers=[pod],
            epochs={"0": 4, "1": 4, "2": 5, "3": 4, "10": 2, "11": 2},
        )
    ).splitlines()
    assert shown[-2].split() == ["POD", "READY", "STATE", "PARTITIONS", "EPOCHS", "REVOKING"]
    assert [cell.strip() for cell in shown[-1].split("  ") if cell.strip()] == [
        "orders-0", "yes", "ready", "0-3,10-11", "2 (10-11), 4 (0-1,3), 5 (2)", "10-11"
    ]  # fmt: skip
    moved = {
        "pod": "c-0",
        "ready": True,
        "state": "ready",
        "partitions": ["0", "11", "12", *map(str, range(24, 32))],
    }
    epochs = {
        "0": 2,
        "11": 3,
        "12": 3,
        **{str(p): 4 if p in (24, 25, 26, 30, 31) else 3 for p in range(24, 32)},
    }
    shown = status.render(
        consumer(observedGeneration=1, partitionCount=32, consumers=[moved], epochs=epochs)
    ).splitlines()
    assert "  c-0  yes    ready  0,11-12,24-31  2 (0), 3 (11-12,27-29), 4 (24-26,30-31)  -" in shown


def test_an_epoch_every_run_shares_is_said_once() -> None:
    """A pod holding scattered partitions at one epoch read ``6,13-15,29-31`` beside ``3,3,3``."""
    pods = [{"pod": "c-0", "ready": True, "state": "ready", "partitions": ["6", "13", "15", "14"]}]
    shown = status.render(
        consumer(
            observedGeneration=1,
            partitionCount=32,
            consumers=pods,
            epochs={"6": 3, "13": 3, "14": 3, "15": 3},
        )
    ).splitlines()
    assert shown[-1].split() == ["c-0", "yes", "ready", "6,13-15", "3", "-"]


def test_counts_agree_with_their_number_and_no_pods_is_said_not_an_empty_table() -> None:
    ready = {"type": "Ready", "status": "False", "reason": "NoPods", "message": "no pod matches"}
    shown = status.render(
        consumer(
            observedGeneration=1, partitionCount=1, memberCount=0, movesTotal=1, conditions=[ready]
        )
    ).splitlines()
    assert shown[0] == "shop/orders: 1 partition, 0 members, 1 move since it was created"
    assert shown[-1] == "  no pod holds a partition (see Ready above)"
    assert not any(line.split()[:1] == ["POD"] for line in shown)


def test_what_tenants_wrote_reaches_the_terminal_as_text() -> None:
    """A condition message quotes a pod's report or a spec's names, which a tenant writes: an
    escape sequence there moved the cursor over the lines ``ehb status -A`` printed of the
    other tenants' consumers and rewrote them, or set the admin's clipboard."""
    forged = "x\x1b[1A\x1b[2Kshop/orders: 4 partitions\x1b]52;c;cm0K\x07\u202e"
    failing = {"type": "PartitionsFailing", "status": "True", "reason": "R", "message": forged}
    pods = [{"pod": forged, "ready": True, "state": forged, "partitions": ["0"]}]
    handoffs = [{"partition": "0", "from": forged, "epoch": 1, "since": forged}]
    shown = status.render(
        consumer(observedGeneration=1, conditions=[failing], consumers=pods, handoffs=handoffs)
    )
    assert all(line.isprintable() for line in shown.splitlines()), repr(shown)
    assert "\\x1b[1A\\x1b[2Kshop/orders: 4 partitions\\x1b]52;c;cm0K\\x07\\u202e" in shown
    assert tables.render(["A"], [[forged]]).splitlines()[1].isprintable()


def live_pod(name: str, uid: str, *, ready: bool = True) -> dict[str, Any]:
    """A pod as the API server lists it."""
    return {
        "metadata": {"name": name, "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": "2026-01-01T00:00:01Z",
                }
            ],
        },
    }


def steady(**extra: Any) -> dict[str, Any]:
    """Two Ready pods holding two partitions each, Ready True: what the operator last wrote."""
    ready = {"type": "Ready", "status": "True", "reason": "AllPartitionsOwned", "message": "ok"}
    fields: dict[str, Any] = dict(
        observedGeneration=1,
        partitionCount=4,
        memberCount=2,
        conditions=[ready],
        consumers=[
            {"pod": "c-0", "ready": True, "state": "ready", "partitions": ["0", "1"]},
            {"pod": "c-1", "ready": True, "state": "ready", "partitions": ["2", "3"]},
        ],
        assignment=[
            {"partition": p, "pod": pod, "podUid": uid, "epoch": 1, "state": "owned"}
            for p, pod, uid in (
                ("0", "c-0", "u0"),
                ("1", "c-0", "u0"),
                ("2", "c-1", "u1"),
                ("3", "c-1", "u1"),
            )
        ],
        epochs={"0": 1, "1": 1, "2": 1, "3": 1},
    )
    return consumer(**{**fields, **extra})


def test_a_status_the_pods_have_left_behind_says_so_above_ready_true() -> None:
    """The operator down and a pod deleted: the status still said Ready True with the gone pod
    Ready and holding its partitions, and nothing said that it was old."""
    shown = status.render(steady(), pods=[live_pod("c-0", "u0")]).splitlines()
    assert shown[0] == (
        "shop/orders: the status is behind the pods: c-1 (holding 2-3) is gone. An operator "
        "updates it within seconds of a change; if this stays, none is reconciling it: is an "
        "operator running that serves namespace shop? (`ehb operator -n shop`, or the chart's "
        "watchNamespaces; kubectl -n <its namespace> logs deploy/<its release> says why it "
        "does not)"
    )
    assert shown[1].startswith("shop/orders: 4 partitions, 2 members")


def test_a_pod_turned_notready_replaced_or_new_since_the_status_is_named() -> None:
    pods = [live_pod("c-0", "u0", ready=False), live_pod("c-1", "u9"), live_pod("c-2", "u2")]
    hint = status.outdated(steady(), pods)
    assert hint is not None
    assert hint.startswith(
        "shop/orders: the status is behind the pods: c-0 (holding 0-1) is not Ready, c-1 "
        "(holding 2-3) was replaced by a pod of the same name, c-2 is not in it. "
    )


def test_a_status_that_agrees_with_the_pods_has_no_hint() -> None:
    assert status.outdated(steady(), [live_pod("c-0", "u0"), live_pod("c-1", "u1")]) is None
    # A refused consumer writes nothing on purpose: its condition says why already.
    conflict = {"type": "Ready", "status": "False", "reason": "Conflict", "message": "m"}
    assert status.outdated(steady(conditions=[conflict]), []) is None


def test_partitions_not_listed_yet_are_said_in_words_not_a_question_mark() -> None:
    """A new consumer whose hub the operator cannot list (the example's placeholder Secret on
    the local stack, a hub not reachable) has a status without ``partitionCount``: the first
    line read ``shop/orders: ? partitions, 0 members, 0 moves``."""
    hub = {
        "type": "EventHubReachable",
        "status": "False",
        "reason": "EventHubUnreachable",
        "message": "Event Hub 'orders' in shop.servicebus.windows.net: unreachable",
    }
    shown = status.render(
        consumer(observedGeneration=1, memberCount=0, movesTotal=0, conditions=[hub])
    ).splitlines()
    assert shown[0] == (
        "shop/orders: partitions not listed yet (see EventHubReachable), 0 members, "
        "0 moves since it was created"
    )


def test_the_batches_set_aside_are_said_per_pod_with_the_command_that_lists_them() -> None:
    pods = [
        {"pod": f"orders-{i}", "ready": True, "state": "ready", "partitions": [str(i)]}
        for i in range(2)
    ]
    aside = [
        {"partition": "3", "pod": "orders-1", "epoch": 2, "batches": 6, "name": "3/13-13"},
        {"partition": "5", "pod": "orders-1", "epoch": 2, "batches": 6, "name": "5/12-12"},
        {"partition": "20", "pod": "orders-0", "epoch": 2, "batches": 1, "name": "20/12-12"},
    ]
    shown = status.render(
        consumer(observedGeneration=1, consumers=pods, epochs={}, deadLettered=aside)
    ).splitlines()
    assert shown[-3:] == [
        "  set aside into the dead letters (ehb deadletters list orders -n shop):",
        "    orders-0: 1 batch of partition 20",
        "    orders-1: 12 batches of partitions 3,5",
    ]
    assert "set aside" not in status.render(consumer(observedGeneration=1, consumers=pods))
