"""``resources`` in both charts: the values schema takes every quantity a Kubernetes API server
takes, and the container gets it as given (over the chart's defaults, which Helm merges in).

The schema refuses what the API server refuses (a misspelt key, `512MB`, `-1`): the cases are
in each chart's own schema tests, and `tests/realkube/wire/test_resource_quantities.py` holds
the pattern against a real kube-apiserver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.install.test_chart_names import (
    CONSUMER_CHART,
    OPERATOR_CHART,
    chart_id,
    chart_values,
    render,
)
from tests.support import charts


def container_resources(chart: Path, values: dict[str, Any]) -> dict[str, Any]:
    (deployment,) = [
        d for d in charts.documents(render(chart, values)) if d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    resources: dict[str, Any] = container["resources"]
    return resources


@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
@pytest.mark.parametrize(
    "quantity", ["1", "1.", ".5", "+1", "1e3", "1E-2", "1.5Gi", "100m", "2k", "5n", 2, 0.5]
)
def test_a_quantity_the_api_server_takes_renders_as_given(
    chart: Path, quantity: str | float
) -> None:
    resources = {"requests": {"cpu": quantity}, "limits": {"memory": quantity}}
    rendered = container_resources(chart, chart_values(chart, resources=resources))
    assert rendered["requests"]["cpu"] == quantity
    assert rendered["limits"]["memory"] == quantity


@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_a_resource_claim_renders(chart: Path) -> None:
    resources = {"limits": {"nvidia.com/gpu": 1}, "claims": [{"name": "gpu"}]}
    rendered = container_resources(chart, chart_values(chart, resources=resources))
    assert rendered["limits"]["nvidia.com/gpu"] == 1  # beside the chart's memory limit
    assert rendered["claims"] == [{"name": "gpu"}]
