"""`ehb local up` brings the three local services up together and stops them on SIGTERM."""

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from eventhub_balancer_devstack import stacks


def test_stack_serves_all_three(tmp_path: Path) -> None:
    from azure.eventhub import EventHubProducerClient
    from azure.storage.blob import BlobServiceClient

    options = stacks.StackOptions(
        hubs={"orders": 3},
        eventhubs_port=0,
        blob_port=0,
        kube_port=0,
        state_dir=tmp_path,
    )
    with stacks.LocalStack(options) as stack:
        producer = EventHubProducerClient.from_connection_string(
            stack.eventhubs_connection_string, eventhub_name="orders"
        )
        with producer:
            assert producer.get_partition_ids() == ["0", "1", "2"]
        blobs = BlobServiceClient.from_connection_string(stack.blob_connection_string)
        blobs.create_container("checkpoints")
        assert [c.name for c in blobs.list_containers()] == ["checkpoints"]
        with urllib.request.urlopen(f"{stack.kube.url}/api/v1/namespaces", timeout=5) as r:
            assert json.load(r)["kind"] == "NamespaceList"
        assert stack.kubeconfig == tmp_path / "kubeconfig"
        assert stack.kubeconfig.read_text().count(stack.kube.url) == 1
        port = stack.azurite.port
    assert not stack.azurite.running
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)


def test_ehb_local_up_prints_and_stops(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "eventhub_balancer", "local", "up", "--hub", "orders=2"]
    argv += ["--eventhubs-port=0", "--blob-port=0", "--kube-port=0", f"--state-dir={tmp_path}"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            if line.startswith("Ctrl-C"):
                break
        text = "\n".join(lines)
        assert "UseDevelopmentEmulator=true" in lines[0]
        assert "hub orders: 2 partitions" in text
        assert "BlobEndpoint=http://127.0.0.1:" in text
        assert f"export KUBECONFIG={tmp_path / 'kubeconfig'}" in text
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "stopped" in err


def test_bad_hub_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "eventhub_balancer", "local", "up", "--hub", "orders"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--hub" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_taken_blob_port_is_named_before_anything_starts(tmp_path: Path) -> None:
    """A second `ehb local up` (or anything else on port 10000): Azurite cannot bind, but the
    port answered, so the stack printed itself as up on someone else's Azurite, wrote its
    kubeconfig over the first stack's, and then died on "Azurite exited unexpectedly"."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "eventhub_balancer", "local", "up", "--hub", "orders=2"]
        argv += ["--eventhubs-port=0", f"--blob-port={port}", "--kube-port=0"]
        result = subprocess.run(
            [*argv, f"--state-dir={tmp_path}"], capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line == (
        f"ehb: error: --blob-port: 127.0.0.1:{port} is taken (another `ehb local up`?): "
        "choose another --blob-port, or 0 for a free one"
    )
    assert not (tmp_path / "kubeconfig").exists()


def test_a_taken_kube_port_names_its_own_flag(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "eventhub_balancer", "local", "up", "--hub", "orders=2"]
        argv += ["--eventhubs-port=0", "--blob-port=0", f"--kube-port={port}"]
        result = subprocess.run(
            [*argv, f"--state-dir={tmp_path}"], capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line == (
        f"ehb: error: --kube-port: 127.0.0.1:{port} is taken (another `ehb local up`?): "
        "choose another --kube-port, or 0 for a free one"
    )


def test_two_consumers_of_one_hub_get_a_checkpoint_location_each(tmp_path: Path) -> None:
    """``--consumer shop/orders --consumer lab/orders`` prepared both on hub orders's
    ``$Default``: one checkpoint location, which their pods fought over, and the operator could
    not tell (their Secrets differ). The second reads a consumer group of its own, made on the
    emulator, so a pod of it can receive."""
    import asyncio

    from eventhub_balancer.adapters import consumergroups, hubclients
    from eventhub_balancer_devstack import consumersetups

    options = stacks.StackOptions(
        hubs={"orders": 2}, eventhubs_port=0, blob_port=0, kube_port=0, state_dir=tmp_path
    )
    setups = consumersetups.parse_all(["shop/orders", "lab/orders"], dict(options.hubs))
    assert [s.consumer_group for s in setups] == ["$Default", "lab.orders"]
    with stacks.LocalStack(options) as stack:
        for setup in setups:
            consumersetups.prepare(stack, setup)
        hubs = [consumersetups.custom_resource(stack, s)["spec"]["eventHub"] for s in setups]
        assert [(h["name"], h["consumerGroup"]) for h in hubs] == [
            ("orders", "$Default"),
            ("orders", "lab.orders"),
        ]
        coordinates = hubclients.Coordinates(
            fully_qualified_namespace=stack.fully_qualified_namespace,
            eventhub_name="orders",
            connection_string=stack.eventhubs_connection_string,
        )
        asyncio.run(consumergroups.probe(coordinates, "lab.orders", "0"))  # it exists
