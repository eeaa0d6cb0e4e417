"""``extraEnv`` in both charts: a variable given twice, or one the chart sets itself, is refused
when the chart renders, naming it.

Before, the container got the name twice: Kubernetes kept the last (an ``EHB_CONSUMER`` of the
user's made the pods report to another consumer, a ``POD_NAMESPACE`` had them look for their
assignment elsewhere), and a server-side apply, as GitOps tools make, was refused for the
duplicate key.
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


def env_of(chart: Path, values: dict[str, Any]) -> list[str]:
    (deployment,) = [
        d for d in charts.documents(render(chart, values)) if d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return [e["name"] for e in container["env"]]


@pytest.mark.parametrize(
    ("chart", "name", "said"),
    [
        (OPERATOR_CHART, "POD_ID", "which the chart sets from the pod itself"),
        (OPERATOR_CHART, "POD_NAMESPACE", "which the chart sets from the pod itself"),
        (CONSUMER_CHART, "EHB_CONSUMER", "set consumer.name instead"),
        (CONSUMER_CHART, "POD_NAME", "which the chart sets from the pod itself"),
        (CONSUMER_CHART, "POD_NAMESPACE", "which the chart sets from the pod itself"),
        (CONSUMER_CHART, "POD_UID", "which the chart sets from the pod itself"),
    ],
    ids=str,
)
def test_a_variable_the_chart_sets_is_refused_naming_it(chart: Path, name: str, said: str) -> None:
    with pytest.raises(charts.HelmError) as e:
        render(chart, chart_values(chart, extraEnv=[{"name": name, "value": "x"}]))
    shown = " ".join(str(e.value).split())
    assert f"extraEnv sets {name}, " in shown
    assert said in shown


@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_a_variable_given_twice_is_refused(chart: Path) -> None:
    twice = [{"name": "TZ", "value": "UTC"}, {"name": "TZ", "value": "Europe/Paris"}]
    with pytest.raises(charts.HelmError, match="extraEnv sets TZ twice: keep one"):
        render(chart, chart_values(chart, extraEnv=twice))


@pytest.mark.parametrize("chart", [OPERATOR_CHART, CONSUMER_CHART], ids=chart_id)
def test_each_variable_is_written_once(chart: Path) -> None:
    extra = [{"name": "TZ", "value": "UTC"}]
    if chart == CONSUMER_CHART:
        # The user's connection string replaces the file the chart would mount (docs/install.md).
        extra.append({"name": "EHB_BLOB_CONNECTION_STRING", "value": "UseDevelopmentStorage=true"})
    names = env_of(chart, chart_values(chart, extraEnv=extra))
    assert len(names) == len(set(names)), names
    assert {e["name"] for e in extra} <= set(names)


def test_a_consumer_variable_without_a_name_is_refused_by_the_schema() -> None:
    with pytest.raises(charts.HelmError, match="at '/extraEnv/0': missing property 'name'"):
        render(CONSUMER_CHART, chart_values(CONSUMER_CHART, extraEnv=[{"value": "x"}]))
