"""``ehb operator --peering`` looks for kopf's peering CRD before kopf starts: without it kopf
keeps the replica paused, serving no consumer, and says so at DEBUG only. When kopf stops on
a resource no longer served while it ran, the peering CRD is named if it is the one gone."""

from __future__ import annotations

import pytest

from eventhub_balancer import errors
from eventhub_balancer.cli import operator_cmd, peeringdefinitions
from eventhub_balancer.handlers import running
from tests.support import operatorcommands


class Discovery:
    """The API server's discovery: the custom resources it serves, or an error."""

    def __init__(self, *served: str, error: errors.EventHubBalancerError | None = None) -> None:
        self.served = set(served)
        self.error = error
        self.asked: list[tuple[str, str, str]] = []

    async def serves(self, group: str, version: str, plural: str) -> bool:
        self.asked.append((group, version, plural))
        if self.error is not None:
            raise self.error
        return plural in self.served


def options_of(*flags: str) -> running.Options:
    return operator_cmd.serving_options(
        operatorcommands.parse("--metrics-insecure", "--metrics-host=127.0.0.1", *flags),
        reviews=None,
    )


async def check(api: Discovery, *flags: str) -> None:
    await peeringdefinitions.check(api, options_of(*flags))  # type: ignore[arg-type]


async def test_a_missing_crd_stops_the_start_with_what_to_apply() -> None:
    with pytest.raises(errors.ConfigurationError) as refused:
        await check(Discovery("clusterkopfpeerings"), "-n", "shop", "--peering", "ehb")
    assert str(refused.value) == (
        "--peering ehb: kopf's peering CRD kopfpeerings.kopf.dev is not installed, and without "
        "it this replica would stay paused, serving no consumer: apply "
        "manifests/peering/kopf-peering-crds.yaml once, or run the operator with --standalone"
    )
    with pytest.raises(errors.ConfigurationError, match=r"clusterkopfpeerings\.kopf\.dev is not"):
        await check(Discovery("kopfpeerings"), "-A", "--peering", "ehb")


async def test_the_crd_of_the_scope_served_is_the_one_asked_for() -> None:
    namespaced, clusterwide = Discovery("kopfpeerings"), Discovery("clusterkopfpeerings")
    await check(namespaced, "-n", "shop", "--peering", "ehb")
    await check(clusterwide, "-A", "--peering", "ehb")
    assert namespaced.asked == [("kopf.dev", "v1", "kopfpeerings")]
    assert clusterwide.asked == [("kopf.dev", "v1", "clusterkopfpeerings")]


async def test_without_peering_nothing_is_asked() -> None:
    api = Discovery()
    await check(api, "-n", "shop")
    await check(api, "-n", "shop", "--standalone")
    assert api.asked == []


async def test_discovery_that_fails_is_left_to_kopf() -> None:
    api = Discovery(error=errors.Forbidden("the API group kopf.dev/v1: forbidden"))
    await check(api, "-n", "shop", "--peering", "ehb")
    assert len(api.asked) == 1


async def gone(api: Discovery, *flags: str) -> errors.ResourceGone:
    return await peeringdefinitions.gone(api, options_of(*flags), GONE)  # type: ignore[arg-type]


#: What the operator stops with when a watch of kopf's answers 404 (`kopfrefusals.gone`).
GONE = errors.ResourceGone("the Kubernetes API stopped serving a resource ...")


async def test_the_peering_crd_deleted_while_running_is_named() -> None:
    said = await gone(Discovery(), "--peering", "ehb", "-A")
    assert str(said) == (
        "--peering ehb: kopf's peering CRD clusterkopfpeerings.kopf.dev was deleted while this "
        "replica ran, and kopf stopped on it: apply manifests/peering/kopf-peering-crds.yaml; "
        "until then each restart stops at its start, naming it (or run the operator with "
        "--standalone)"
    )


@pytest.mark.parametrize(
    ("api", "flags"),
    [
        (Discovery("kopfpeerings"), ("--peering", "ehb", "-n", "shop")),  # another CRD went
        (Discovery(), ("--standalone", "-n", "shop")),  # no peering: nothing asked
        (Discovery(error=errors.TransientError("down")), ("--peering", "ehb", "-n", "shop")),
    ],
)
async def test_any_other_resource_gone_is_said_as_it_was(
    api: Discovery, flags: tuple[str, ...]
) -> None:
    assert await gone(api, *flags) is GONE
