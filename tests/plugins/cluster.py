"""The `cluster` marker: e2e tests against the real cluster in $KUBECONFIG run only on request."""

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.getoption("-m") or ""
    if "cluster" in markexpr:
        return
    skip = pytest.mark.skip(reason="needs a real cluster: run with -m cluster")
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)
