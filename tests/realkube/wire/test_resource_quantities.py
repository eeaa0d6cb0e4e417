"""The charts' values schemas take a resource quantity as a real kube-apiserver takes one.

`resources` of either chart goes into a Deployment's pod template as it is. A quantity the API
server refuses (`512MB`, `2K`, `-1`) used to pass `helm install`'s schema check and the
render, and the Deployment was refused after the release's other objects were applied. The
schemas now check each quantity with a pattern (`definitions.quantity`); this test holds that
pattern against the API server itself: each case is a pod applied with `--dry-run=server`.

The schema may be the stricter one on nonsense the API server reads as something (`.` is 0 to
it, and so is `Gi`; `1Gi ` with a trailing space is `1Gi`), never the other way round.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support import loading
from tests.support.fixtures.realkube import Kubectl

CHARTS = ("eventhub-balancer", "eventhub-consumer")
TAKEN = ("1", "1.", ".5", "+1", "+.5", "1e3", "1E-2", "1.5Gi", "100m", "2k", "1Ki", "5n", "1Ei")
REFUSED = ("2K", "512MB", "-1", "1.5.5", "", "1 Gi", "0x10", "1e", "1ei")
#: What the schema refuses though the API server reads something into it (`Gi` is 0 to it).
STRICTER = (".", "Gi", "1Gi ")


def quantity_schema(chart: str) -> dict[str, Any]:
    schema = json.loads((loading.ROOT / "charts" / chart / "values.schema.json").read_text())
    quantity: dict[str, Any] = schema["definitions"]["quantity"]
    return quantity


def pattern() -> re.Pattern[str]:
    patterns = {quantity_schema(chart)["pattern"] for chart in CHARTS}
    assert len(patterns) == 1, "the two charts take quantities differently"
    return re.compile(patterns.pop())


def pod(quantity: str) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "consumer",
        "resources": {"requests": {"memory": quantity}, "limits": {"memory": quantity}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "quantity", "namespace": "default"},
        "spec": {"containers": [container]},
    }


@pytest.mark.parametrize("quantity", TAKEN + REFUSED + STRICTER, ids=repr)
def test_the_schema_refuses_a_quantity_the_api_server_refuses(
    real_kubectl: Kubectl, quantity: str
) -> None:
    done = real_kubectl(
        "apply", "--dry-run=server", "-f", "-", input=json.dumps(pod(quantity)), check=False
    )
    server_takes = done.returncode == 0
    schema_takes = pattern().fullmatch(quantity) is not None
    if server_takes:
        assert schema_takes == (quantity not in STRICTER), quantity
    else:
        said = done.stderr
        assert "quantit" in said or "greater than or equal to 0" in said, said
        assert not schema_takes, f"the schema takes {quantity!r}, the API server refuses it"
    assert server_takes == (quantity not in REFUSED), done.stderr
