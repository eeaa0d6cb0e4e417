"""``ehb operator`` looks for the EventHubConsumer CRD, and with ``--peering`` kopf's peering CRD,
before kopf starts: without one, kopf served nothing, saying so in one warning or at DEBUG
only, and with named namespaces never looked again. When kopf stops on a resource no longer
served while it ran, the CRD gone is named."""

from __future__ import annotations

import pytest

from eventhub_balancer import errors
from eventhub_balancer.cli import crddefinitions, operator_cmd
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
    await crddefinitions.check(api, options_of(*flags))  # type: ignore[arg-type]


#: What every install serves: the EventHubConsumer CRD.
EHC = "eventhubconsumers"
ASKED_EHC = ("eventhub-balancer.dev", "v1alpha1", EHC)


async def test_a_missing_consumer_crd_stops_the_start_with_what_to_apply() -> None:
    """With ``-n`` kopf looked for it once, warned ``Unresolved resources cannot be served``,
    and served nothing, even once the CRD was applied."""
    for flags in (("-n", "shop"), ("-A",), ("-n", "shop", "--peering", "ehb")):
        with pytest.raises(errors.ConfigurationError) as refused:
            await check(Discovery("kopfpeerings", "clusterkopfpeerings"), *flags)
        assert str(refused.value) == (
            "the EventHubConsumer CRD eventhubconsumers.eventhub-balancer.dev is not installed, "
            "and without it the operator serves no consumer: apply crds/ (the chart installs it "
            "from its own crds/ folder; a GitOps tool must sync it before the operator)"
        )


async def test_a_missing_crd_stops_the_start_with_what_to_apply() -> None:
    with pytest.raises(errors.ConfigurationError) as refused:
        await check(Discovery(EHC, "clusterkopfpeerings"), "-n", "shop", "--peering", "ehb")
    assert str(refused.value) == (
        "--peering ehb: kopf's peering CRD kopfpeerings.kopf.dev is not installed, and without "
        "it this replica would stay paused, serving no consumer: apply "
        "manifests/peering/kopf-peering-crds.yaml once, or run the operator with --standalone"
    )
    with pytest.raises(errors.ConfigurationError, match=r"clusterkopfpeerings\.kopf\.dev is not"):
        await check(Discovery(EHC, "kopfpeerings"), "-A", "--peering", "ehb")


async def test_the_crd_of_the_scope_served_is_the_one_asked_for() -> None:
    namespaced = Discovery(EHC, "kopfpeerings")
    clusterwide = Discovery(EHC, "clusterkopfpeerings")
    await check(namespaced, "-n", "shop", "--peering", "ehb")
    await check(clusterwide, "-A", "--peering", "ehb")
    assert namespaced.asked == [ASKED_EHC, ("kopf.dev", "v1", "kopfpeerings")]
    assert clusterwide.asked == [ASKED_EHC, ("kopf.dev", "v1", "clusterkopfpeerings")]


async def test_without_peering_only_the_consumer_crd_is_asked() -> None:
    api = Discovery(EHC)
    await check(api, "-n", "shop")
    await check(api, "-n", "shop", "--standalone")
    assert api.asked == [ASKED_EHC, ASKED_EHC]


async def test_discovery_that_fails_is_left_to_kopf() -> None:
    api = Discovery(error=errors.Forbidden("the API group kopf.dev/v1: forbidden"))
    await check(api, "-n", "shop", "--peering", "ehb")
    assert len(api.asked) == 1  # the first refused: neither is taken for missing


async def gone(api: Discovery, *flags: str) -> errors.ResourceGone:
    return await crddefinitions.gone(api, options_of(*flags), GONE)  # type: ignore[arg-type]


#: What the operator stops with when a watch of kopf's answers 404 (`kopfrefusals.gone`).
GONE = errors.ResourceGone("the Kubernetes API stopped serving a resource ...")


async def test_the_peering_crd_deleted_while_running_is_named() -> None:
    said = await gone(Discovery(EHC), "--peering", "ehb", "-A")
    assert str(said) == (
        "--peering ehb: kopf's peering CRD clusterkopfpeerings.kopf.dev was deleted while this "
        "replica ran, and kopf stopped on it: apply manifests/peering/kopf-peering-crds.yaml; "
        "until then each restart stops at its start, naming it (or run the operator with "
        "--standalone)"
    )


async def test_the_consumer_crd_deleted_while_running_is_named() -> None:
    said = await gone(Discovery("kopfpeerings"), "--peering", "ehb", "-n", "shop")
    assert str(said) == (
        "the EventHubConsumer CRD eventhubconsumers.eventhub-balancer.dev was deleted while the "
        "operator ran, and every EventHubConsumer with it: apply crds/ to serve consumers "
        "again; until then each restart stops at its start, naming it"
    )


@pytest.mark.parametrize(
    ("api", "flags"),
    [
        (Discovery(EHC, "kopfpeerings"), ("--peering", "ehb", "-n", "shop")),  # another went
        (Discovery(EHC), ("--standalone", "-n", "shop")),  # no peering: its CRD not asked
        (Discovery(error=errors.TransientError("down")), ("--peering", "ehb", "-n", "shop")),
    ],
)
async def test_any_other_resource_gone_is_said_as_it_was(
    api: Discovery, flags: tuple[str, ...]
) -> None:
    assert await gone(api, *flags) is GONE
