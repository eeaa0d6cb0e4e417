"""The local Kubernetes API server in a process of its own, as the balance benchmark runs it:
the harness's direct store calls go to the child, clients reach it by its kubeconfig, and its
write record comes back with the commit times the benchmark's stages read."""

from __future__ import annotations

from pathlib import Path

import kubernetes.client
import kubernetes.config
import pytest

from eventhub_balancer_devstack.benchmarks import apartservers

NS = "apart"


def test_direct_calls_clients_and_the_write_record(tmp_path: Path) -> None:
    api = apartservers.ApiServerApart(directory=tmp_path)
    with pytest.raises(RuntimeError, match="not running"):
        api.list_objects("v1/configmaps", namespace=NS)
    with api:
        api.record_writes("v1/configmaps")
        created = api.create_object(
            "v1/configmaps",
            {"metadata": {"name": "m", "labels": {"k": "v"}}, "data": {"a": "1"}},
            namespace=NS,
        )
        assert created["metadata"]["uid"]
        # A client of its own, by the kubeconfig the stack writes for it.
        kubeconfig = api.write_kubeconfig(tmp_path / "kc", namespace=NS)
        client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        core = kubernetes.client.CoreV1Api(client)
        core.patch_namespaced_config_map("m", NS, {"data": {"a": "2"}})
        assert (api.get_object("v1/configmaps", "m", namespace=NS) or {})["data"] == {"a": "2"}
        assert api.get_object("v1/configmaps", "absent", namespace=NS) is None
        listed = api.list_objects("v1/configmaps", namespace=NS, label_selector="k=v")
        assert [o["metadata"]["name"] for o in listed] == ["m"]
        assert api.list_objects("v1/configmaps", namespace=NS, label_selector="k=w") == []
        writes = api.take_writes()
        assert [(e.type, e.body["data"]) for e in writes.events] == [
            ("ADDED", {"a": "1"}),
            ("MODIFIED", {"a": "2"}),
        ]
        assert writes.events[1].previous is not None
        assert writes.events[0].committed_at <= writes.events[1].committed_at
        assert api.take_writes().events == ()
        # A failed call is raised here, with the child's reason.
        with pytest.raises(RuntimeError, match="apiserver process"):
            api.create_object("v1/nothings", {"metadata": {"name": "x"}}, namespace=NS)
        client.close()
    with pytest.raises(RuntimeError, match="not running"):
        api.take_writes()
