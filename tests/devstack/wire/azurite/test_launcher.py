"""The Azurite launcher, ``ehb local blob``, and the Azurite facts the checkpoint store needs."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core import exceptions as azure_errors
from azure.storage.blob import ContainerClient

from eventhub_balancer import errors
from eventhub_balancer_devstack.azurite import Azurite
from tests.support import paths
from tests.support.ports import accepts

REPOSITORY = paths.REPOSITORY


def test_start_serves_on_a_free_port_and_stop_frees_it() -> None:
    service = Azurite()
    with service:
        port = service.port
        assert port > 0
        assert accepts(port)
        assert f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1" in service.connection_string
        with ContainerClient.from_connection_string(service.connection_string, "launcher") as c:
            c.create_container()
            assert c.exists()
    assert not service.running
    assert not accepts(port)


def test_two_instances_get_different_ports() -> None:
    with Azurite() as first, Azurite() as second:
        assert first.port != second.port
        assert accepts(first.port)
        assert accepts(second.port)


def test_a_location_keeps_blobs_across_restarts(tmp_path: Path) -> None:
    with Azurite(location=tmp_path / "blobs") as service:  # noqa: SIM117 (the order matters)
        with ContainerClient.from_connection_string(service.connection_string, "kept") as c:
            c.create_container()
            c.upload_blob("a/b", b"", metadata={"sequencenumber": "7"})
    with Azurite(location=tmp_path / "blobs") as service:  # noqa: SIM117
        with ContainerClient.from_connection_string(service.connection_string, "kept") as c:
            assert c.get_blob_client("a/b").get_blob_properties().metadata == {
                "sequencenumber": "7"
            }


def test_a_relative_location_is_the_folder_it_names_from_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ehb local blob --location -1``: Azurite read '-1' as a flag and printed its usage;
    ``--location blobs`` kept the blobs in blobs/blobs, as Azurite runs inside the folder."""
    monkeypatch.chdir(tmp_path)
    with Azurite(location=Path("-1")) as service:  # noqa: SIM117 (the order matters)
        with ContainerClient.from_connection_string(service.connection_string, "here") as c:
            c.create_container()
    assert (tmp_path / "-1").is_dir()
    assert not (tmp_path / "-1" / "-1").exists()
    assert any((tmp_path / "-1").iterdir())


def test_missing_installation_says_to_run_make_node(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigurationError, match="make node"):
        Azurite(node_modules=tmp_path / "node_modules").start()


def test_ehb_local_blob_prints_the_connection_string_and_stops_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "eventhub_balancer", "local", "blob"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        assert first.startswith("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;")
        with ContainerClient.from_connection_string(first, "from-cli") as c:
            c.create_container()
            assert c.exists()
        port = int(first.split("BlobEndpoint=http://127.0.0.1:")[1].split("/")[0])
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
        assert not accepts(port)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def test_ehb_local_blob_refuses_a_bad_port() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "eventhub_balancer", "local", "blob", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPOSITORY,
        env={**os.environ},
    )
    assert done.returncode == 2
    assert "--port" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_fixed_port_is_refused_not_taken_for_azurite() -> None:
    """Something else listens on the port: Azurite cannot bind it, yet the port answered, so
    start() returned as if Azurite were up, and the caller talked to the other service."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = Azurite(port=port)
        try:
            with pytest.raises(OSError, match=f"127.0.0.1:{port} is taken") as raised:
                service.start()
            assert raised.value.errno == errno.EADDRINUSE
            assert not service.running
        finally:
            service.stop()  # an Azurite that did start is not left behind


def test_ehb_local_blob_names_a_taken_port() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "eventhub_balancer", "local", "blob", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPOSITORY,
        )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"ehb: error: --port: 127.0.0.1:{port} is taken: choose another --port, or 0 for a free one"
    ]


def test_ehb_local_blob_names_a_location_that_cannot_be_a_folder(tmp_path: Path) -> None:
    """A file given as --location was said as a port taken: mkdir's error came up through
    the handler of the bind's."""
    afile = tmp_path / "blobs"
    afile.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "eventhub_balancer", "local", "blob", "--location", str(afile)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPOSITORY,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"ehb: error: --location: {afile} cannot be made a directory (it is a file): give a "
        "directory, or a path where one can be made"
    ]


# Azurite's conditional writes, as docs/checkpoints.md states them and the checkpoint store uses.


async def test_stale_if_match_is_refused_with_412(blob_container: Any) -> None:
    blob = blob_container.get_blob_client("x")
    created = await blob.upload_blob(b"", overwrite=False, metadata={"v": "1"})
    await blob.set_blob_metadata(
        {"v": "2"}, etag=created["etag"], match_condition=MatchConditions.IfNotModified
    )
    with pytest.raises(azure_errors.ResourceModifiedError) as caught:
        await blob.set_blob_metadata(
            {"v": "3"}, etag=created["etag"], match_condition=MatchConditions.IfNotModified
        )
    assert caught.value.status_code == 412
    assert (await blob.get_blob_properties()).metadata == {"v": "2"}


async def test_if_match_on_a_missing_blob_is_refused_with_412_or_404(blob_container: Any) -> None:
    blob = blob_container.get_blob_client("missing")
    with pytest.raises((azure_errors.ResourceModifiedError, azure_errors.ResourceNotFoundError)):
        await blob.set_blob_metadata(
            {"v": "1"}, etag='"0x8D000000000000"', match_condition=MatchConditions.IfNotModified
        )
    assert not await blob.exists()


async def test_create_without_overwrite_refuses_an_existing_blob(blob_container: Any) -> None:
    blob = blob_container.get_blob_client("x")
    await blob.upload_blob(b"", overwrite=False, metadata={"v": "1"})
    with pytest.raises(azure_errors.ResourceExistsError):
        await blob.upload_blob(b"", overwrite=False, metadata={"v": "2"})
    assert (await blob.get_blob_properties()).metadata == {"v": "1"}


async def test_listed_unquoted_etags_work_for_if_match(blob_container: Any) -> None:
    blob = blob_container.get_blob_client("x")
    created = await blob.upload_blob(b"", overwrite=False, metadata={"v": "1"})
    listed = [item async for item in blob_container.list_blobs(include=["metadata"])]
    assert created["etag"].startswith('"')
    assert not listed[0].etag.startswith('"')
    await blob.set_blob_metadata(
        {"v": "2"}, etag=listed[0].etag, match_condition=MatchConditions.IfNotModified
    )
    assert (await blob.get_blob_properties()).metadata == {"v": "2"}
