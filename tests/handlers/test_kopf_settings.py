"""`kopfwiring.configure`: the kopf settings the operator starts with.

A namespaced operator whose namespaces are all named exactly does not scan the cluster's
namespaces (the chart grants a namespaced install no cluster-wide read; kopf would wait out
its retries of the 403 at every start): checked against the chart's RBAC on kube-apiserver in
``tests/realkube/wire/test_operator_scenario.py``.
"""

from __future__ import annotations

from collections.abc import Collection

import kopf
import pytest

from eventhub_balancer.handlers import kopfwiring


def configured(*, clusterwide: bool, namespaces: Collection[str]) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    kopfwiring.configure(
        settings,
        peering_name=None,
        standalone=True,
        clusterwide=clusterwide,
        priority=0,
        namespaces=namespaces,
    )
    return settings


@pytest.mark.parametrize("namespaces", [("shop",), ("shop", "billing-eu")])
def test_named_namespaces_are_served_without_scanning_the_cluster(
    namespaces: tuple[str, ...],
) -> None:
    assert configured(clusterwide=False, namespaces=namespaces).scanning.disabled


@pytest.mark.parametrize(
    ("clusterwide", "namespaces"),
    [
        (True, ()),
        # kopf matches a pattern against the namespaces it lists: that needs the scanning.
        (False, ("shop-*",)),
        (False, ("shop", "team-?")),
        (False, ("!kube-system",)),
        (False, ("shop,billing",)),
    ],
)
def test_the_cluster_wide_operator_and_patterns_keep_kopfs_scanning(
    clusterwide: bool, namespaces: tuple[str, ...]
) -> None:
    assert not configured(clusterwide=clusterwide, namespaces=namespaces).scanning.disabled
