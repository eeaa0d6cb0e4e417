"""The local node's Secret volumes follow their Secrets, every `SYNC_S`, for running pods."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from eventhub_balancer_devstack import deployments
from eventhub_balancer_devstack.realkube import runningpods, secretvolumes


class Pod:
    """What `SecretVolumes.sync` reads of a `runningpods.RunningPod`."""

    def __init__(self, name: str) -> None:
        self.namespace, self.name = "shop", name
        self.spec: dict[str, Any] = {
            "volumes": [
                {
                    "name": "creds",
                    "secret": {"secretName": "s", "items": [{"key": "k", "path": "f"}]},
                }
            ],
            "containers": [{"volumeMounts": [{"name": "creds", "mountPath": "/var/run/creds"}]}],
        }


def test_each_running_pods_files_are_written_again_once_a_sync_is_due(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    values = {"k": "1"}
    asked: list[str] = []

    def secret_value(namespace: str) -> Any:
        def value(secret: str, key: str) -> str:
            asked.append(f"{namespace}/{secret}")
            if key not in values:
                raise ApiException(status=503)
            return values[key]

        return value

    volumes = secretvolumes.SecretVolumes(secret_value, tmp_path, clock=lambda: now[0])
    pods = cast(list[runningpods.RunningPod], [Pod("a"), Pod("b")])
    files = [tmp_path / "shop" / name / "volumes" / "creds" / "f" for name in "ab"]
    volumes.sync(pods)
    assert asked == []  # not due yet: the pods' files were written at their start
    now[0] = secretvolumes.SYNC_S
    caplog.set_level(logging.INFO, logger=secretvolumes.__name__)
    volumes.sync(pods)
    assert [f.read_text() for f in files] == ["1", "1"]
    assert [r.getMessage() for r in caplog.records] == [
        "pod shop/a: creds/f written again: its Secret changed",
        "pod shop/b: creds/f written again: its Secret changed",
    ]
    values["k"] = "2"
    now[0] += secretvolumes.SYNC_S - 0.1
    volumes.sync(pods)
    assert [f.read_text() for f in files] == ["1", "1"]  # within the period: not read
    now[0] += 0.1
    volumes.sync(pods)
    assert [f.read_text() for f in files] == ["2", "2"]
    # The API away, or the Secret gone: the files stay, and the next pods are still synced.
    del values["k"]
    now[0] += secretvolumes.SYNC_S
    volumes.sync(pods)
    assert [f.read_text() for f in files] == ["2", "2"]
    assert asked.count("shop/s") == 6


def test_a_missing_secret_is_no_error(tmp_path: Path) -> None:
    def gone(namespace: str) -> Any:
        def value(secret: str, key: str) -> str:
            raise deployments.MissingSecret(f'secret "{secret}" not found')

        return value

    file = tmp_path / "shop" / "a" / "volumes" / "creds" / "f"
    file.parent.mkdir(parents=True)
    file.write_text("last")
    now = [0.0]
    volumes = secretvolumes.SecretVolumes(gone, tmp_path, clock=lambda: now[0])
    now[0] = secretvolumes.SYNC_S
    volumes.sync(cast(list[runningpods.RunningPod], [Pod("a")]))
    assert file.read_text() == "last"


def test_a_pod_whose_folder_cannot_be_written_leaves_the_others_synced(tmp_path: Path) -> None:
    """The sync runs in the node's probe round: an error it let out stopped every probe."""

    def value(namespace: str) -> Any:
        return lambda secret, key: "v"

    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "a").write_text("a file where the pod's folder would be")
    now = [0.0]
    volumes = secretvolumes.SecretVolumes(value, tmp_path, clock=lambda: now[0])
    now[0] = secretvolumes.SYNC_S
    volumes.sync(cast(list[runningpods.RunningPod], [Pod("a"), Pod("b")]))
    assert (tmp_path / "shop" / "b" / "volumes" / "creds" / "f").read_text() == "v"
