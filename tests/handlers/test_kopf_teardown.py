"""kopf keeps serving the EventHubConsumers while their CRD is deleted (`kopfteardown`).

kube-apiserver's discovery lists a resource whose CRD is being deleted without ``patch``;
kopf 1.45 then stopped serving the consumers, so their finalizers stayed, and the CRD stayed
Terminating with the operator running. Here kopf's own decision is made on discovery's
resources as the real server lists them then; the real deletion is replayed in
`tests/realkube/wire/test_crds_deleted.py`.
"""

from __future__ import annotations

import logging

import pytest
from kopf._cogs.structs import references
from kopf._core.reactor import observation

from eventhub_balancer.contracts import specs
from eventhub_balancer.handlers import kopfteardown

SERVED = frozenset({"create", "delete", "get", "list", "patch", "update", "watch"})
#: What discovery says of a resource whose CRD is being deleted.
DELETING = frozenset({"delete", "deletecollection", "get", "list", "watch"})


def resource(plural: str, group: str, verbs: frozenset[str]) -> references.Resource:
    return references.Resource(group, "v1alpha1", plural, namespaced=True, verbs=verbs)


def decide(resources: set[references.Resource]) -> set[references.Resource]:
    """kopf's decision of what it serves among ``resources``, all selected by a handler that
    patches (as the operator's are), as kopf's observer makes it."""
    selectors = frozenset(
        references.Selector(group=r.group, version=r.version, plural=r.plural) for r in resources
    )
    kept = set(resources)
    observation._disable_unsuitable_resources(resources=kept, selectors=selectors)
    return kept


@pytest.fixture(autouse=True)
def installed() -> None:
    kopfteardown.install()


def test_the_consumers_stay_served_while_their_crd_is_deleted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumers = resource(specs.PLURAL, specs.GROUP, DELETING)
    with caplog.at_level(logging.WARNING, logger=observation.__name__):
        assert decide({consumers}) == {consumers}
    assert caplog.messages == []  # not "Non-patchable resources will not be served"


def test_any_other_resource_without_patch_is_left_to_kopf() -> None:
    others = resource("widgets", "example.com", DELETING)
    assert decide({others, resource(specs.PLURAL, specs.GROUP, SERVED)}) == {
        resource(specs.PLURAL, specs.GROUP, SERVED)
    }


def test_consumers_that_cannot_be_watched_are_left_to_kopf() -> None:
    unwatchable = resource(specs.PLURAL, specs.GROUP, frozenset({"get", "delete"}))
    assert decide({unwatchable}) == set()


def test_kopf_still_decides_it_where_install_takes_it_over() -> None:
    """A kopf that decides elsewhere would keep its own rule: this fails first."""
    assert observation._disable_unsuitable_resources is kopfteardown._disable_unsuitable_resources
    assert kopfteardown.STOCK_DISABLE.__module__ == observation.__name__
