"""``ehb status`` pointed at a cluster where the CRD is not installed (the operator's chart not
installed yet, or KUBECONFIG naming another cluster): the API server has no EventHubConsumers
to list, and says 404. ``ehb status`` printed ``EventHubConsumers in default: not found``,
which reads as if the namespace were wrong, and said nothing of the CRD."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventhub_balancer import cli
from eventhub_balancer_devstack.kube import LocalKubeAPI


@pytest.mark.parametrize("scope", [[], ["-n", "shop"], ["-A"]], ids=["context", "-n", "-A"])
def test_status_on_a_cluster_without_the_crd_says_to_install_it(
    scope: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crds = tmp_path / "crds"
    crds.mkdir()
    with LocalKubeAPI(crds_dir=crds) as api:
        kubeconfig, url = api.write_kubeconfig(tmp_path / "kubeconfig"), api.url
        assert cli.main(["status", *scope, "--kubeconfig", str(kubeconfig)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"ehb: error: the cluster at {url} serves no EventHubConsumers "
        "(eventhub-balancer.dev/v1alpha1): install the CRD"
    )
    assert "crds/" in line
    assert "KUBECONFIG" in line
