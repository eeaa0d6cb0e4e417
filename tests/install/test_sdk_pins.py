"""The private azure-eventhub call the receiver depends on, held to what it is proven on.

adapters/receiving.py opens each partition link with ``EventHubConsumerClient._create_consumer``
(the aio client's private factory: the public ``receive_batch`` runs the SDK's own load
balancer, which this project replaces), opens its link with ``EventHubConsumer._open`` and
drives it with ``EventHubConsumer.receive``.
pyproject.toml pins azure-eventhub to the minor this was measured on; if a new release
changes the private names or the keyword arguments read from ``**kwargs``, this test fails
before a pod does.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import tomllib

from azure.eventhub.aio import EventHubConsumerClient
from azure.eventhub.aio._consumer_async import EventHubConsumer

from tests.support import paths

#: What receiving.py passes to ``_create_consumer`` by keyword (read from ``**kwargs``).
KEYWORDS = (
    "owner_level",
    "prefetch",
    "track_last_enqueued_event_properties",
    "event_position_inclusive",
)


def test_create_consumer_takes_what_the_receiver_passes() -> None:
    parameters = list(inspect.signature(EventHubConsumerClient._create_consumer).parameters)
    assert parameters[:5] == [
        "self",
        "consumer_group",
        "partition_id",
        "event_position",
        "on_event_received",
    ]
    source = inspect.getsource(EventHubConsumerClient._create_consumer)
    for keyword in KEYWORDS:
        assert f'kwargs.get("{keyword}"' in source, f"_create_consumer no longer reads {keyword}"


def test_the_consumer_receives_in_batches() -> None:
    parameters = list(inspect.signature(EventHubConsumer.receive).parameters)
    assert parameters == ["self", "batch", "max_batch_size", "max_wait_time"]


def test_the_consumer_opens_its_link_before_receiving() -> None:
    """receiving.py awaits ``EventHubConsumer._open()`` to log when the link is open."""
    assert inspect.iscoroutinefunction(EventHubConsumer._open)
    assert list(inspect.signature(EventHubConsumer._open).parameters) == ["self"]


def test_the_pin_allows_only_the_proven_minor() -> None:
    pyproject = tomllib.loads((paths.REPOSITORY / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("azure-eventhub")]
    match = re.fullmatch(r"azure-eventhub>=(\d+)\.(\d+)(?:\.\d+)?,<(\d+)\.(\d+)", pin)
    assert match, f"{pin!r}: pin azure-eventhub to one minor (>=5.15.1,<5.16)"
    low_major, low_minor, high_major, high_minor = map(int, match.groups())
    assert (high_major, high_minor) == (low_major, low_minor + 1)
    installed = importlib.metadata.version("azure-eventhub")
    assert installed.split(".")[:2] == [str(low_major), str(low_minor)]


def test_the_build_backend_can_build_the_license_field() -> None:
    pyproject = tomllib.loads((paths.REPOSITORY / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools)
    assert floor, setuptools
    # A license expression (PEP 639) needs setuptools 77 or newer.
    assert int(floor.group(1)) >= 77
    assert (paths.REPOSITORY / "LICENSE").read_text().startswith("MIT License")


def test_the_version_lives_in_one_place() -> None:
    import yaml

    from eventhub_balancer import __version__

    pyproject = tomllib.loads((paths.REPOSITORY / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "eventhub_balancer.__version__"
    }
    chart = yaml.safe_load((paths.REPOSITORY / "charts/eventhub-balancer/Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)
    changelog = (paths.REPOSITORY / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, flags=re.MULTILINE)
    assert released
    assert released[0] == __version__


def test_the_consumer_group_probe_reads_the_refusal_with_the_handlers_own_step() -> None:
    """adapters/consumergroups.py, after ``_open``, reads the frames that may follow the
    attach with one ``do_work_async`` of the link's AMQP client, and reads a refusal's
    ``condition`` and ``description`` (adapters/linkrefusals.py)."""
    from azure.eventhub._pyamqp.aio import ReceiveClientAsync
    from azure.eventhub._pyamqp.error import AMQPLinkError

    assert inspect.iscoroutinefunction(ReceiveClientAsync.do_work_async)
    refused = AMQPLinkError(condition=b"amqp:not-found", description=b"gone")
    assert (refused.condition, refused.description) == (b"amqp:not-found", b"gone")
