"""``-n`` defaults to the kubeconfig context's namespace, as kubectl's does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from eventhub_balancer import errors
from eventhub_balancer.cli import kubecontexts


def kubeconfig(path: Path, *, current: str, contexts: dict[str, str | None]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": current,
                "contexts": [
                    {"name": name, "context": {"cluster": "c", **({"namespace": ns} if ns else {})}}
                    for name, ns in contexts.items()
                ],
            }
        )
    )
    return path


def test_the_current_context_names_the_namespace(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", current="aks", contexts={"aks": "shop", "kind": "x"})
    assert kubecontexts.default_namespace(str(path), {}) == "shop"


def test_a_context_without_a_namespace_means_default(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", current="aks", contexts={"aks": None})
    assert kubecontexts.default_namespace(str(path), {}) == "default"


def test_kubeconfig_lists_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "a", current="aks", contexts={"other": "x"})
    second = kubeconfig(tmp_path / "b", current="ignored", contexts={"aks": "billing"})
    env = {"KUBECONFIG": f"{first}:{second}"}
    assert kubecontexts.default_namespace(None, env) == "billing"


def test_no_kubeconfig_means_default(tmp_path: Path) -> None:
    assert kubecontexts.default_namespace(None, {"HOME": str(tmp_path)}) == "default"


def test_in_a_pod_it_is_the_pods_namespace(tmp_path: Path) -> None:
    mounted = tmp_path / "namespace"
    mounted.write_text("shop\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert kubecontexts.default_namespace(None, env, service_account_namespace=mounted) == "shop"


def test_a_broken_kubeconfig_says_where(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("apiVersion: v1\ncontexts: [\n  - bad\n")
    with pytest.raises(errors.InvalidInput, match=r"line 3, column 3") as caught:
        kubecontexts.default_namespace(str(path), {})
    assert caught.value.field == "--kubeconfig"
    path.write_text("- a list\n")
    with pytest.raises(errors.InvalidInput, match="is not a kubeconfig"):
        kubecontexts.default_namespace(None, {"KUBECONFIG": str(path)})


def test_ehb_status_uses_the_context_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventhub_balancer import cli
    from eventhub_balancer.adapters import kubeapi

    seen: list[str | None] = []

    class FakeAPI:
        async def list_consumers(self, *, namespace: str | None) -> list[object]:
            seen.append(namespace)
            return []

        def close(self) -> None:
            pass

    monkeypatch.setattr(kubeapi.KubeAPI, "from_environment", classmethod(lambda c, k: FakeAPI()))
    path = kubeconfig(tmp_path / "config", current="aks", contexts={"aks": "shop"})
    assert cli.main(["status", "--kubeconfig", str(path)]) == 0
    assert cli.main(["status", "--kubeconfig", str(path), "-n", "billing"]) == 0
    assert cli.main(["status", "--kubeconfig", str(path), "-A"]) == 0
    # An empty namespace is followed by one cluster-wide list: where the consumers are.
    assert seen == ["shop", None, "billing", None, None]
