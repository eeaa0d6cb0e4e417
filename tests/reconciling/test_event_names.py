"""An Event's name is one a real API server accepts: it checks ``generateName`` as a DNS-1123
subdomain whose trailing '-' stands for a letter, so the prefix "orders." was refused (422) and
no Event was ever posted there."""

from __future__ import annotations

import re

import pytest

from eventhub_balancer.reconciling import kubeevents
from tests.reconciling.bodies import T0

#: IsDNS1123Subdomain, as the API server applies it.
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize("name", ["orders", "orders.v2", "a" * 253, "x-" * 126 + "y"])
def test_an_events_generate_name_is_one_the_api_server_accepts(name: str) -> None:
    consumer = {"metadata": {"name": name, "namespace": "shop", "uid": "uid-ehc"}}
    event = kubeevents.KubeEvent(reason="ConsumerGroupNotFound", message="m", type="Warning")
    body = kubeevents.body(consumer, event, now=T0)  # type: ignore[arg-type]
    prefix = body["metadata"]["generateName"]
    assert prefix.startswith(name[:50])
    masked = prefix[:-1] + "a" if prefix.endswith("-") else prefix
    assert len(masked) <= 253
    assert SUBDOMAIN.fullmatch(masked), prefix
