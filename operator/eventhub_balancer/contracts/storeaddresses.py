"""Where one consumer's checkpoint blobs live, and how the operator reads them.

A cycle gathers this once, from the spec and the Secret its checkpoint store names, and hands
it to every read of the store (the checkpoints, the SDK's ownership blobs beside them): through
``handlers.ports.HubPort``, the Event Hubs adapter and its container clients.
"""

from __future__ import annotations

import dataclasses

from eventhub_balancer.contracts import checkpointblobs, specs


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreAddress:
    """The checkpoint blobs of one consumer group, the container that holds them, the
    credentials they are read with, and the consumer whose cycle reads them."""

    #: the blobs' names: ``<namespace>/<hub>/<consumer group>/...`` (`checkpointblobs`)
    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    #: the blob container, reached by its connection string or else by its account URL
    container_name: str
    #: the value of the checkpoint store's Secret (None: an identity reads the blobs); never
    #: shown
    connection_string: str | None = dataclasses.field(repr=False)
    account_url: str | None = None
    #: the Kubernetes namespace of the consumer that reads (None: nobody says who asks), the
    #: tenant its calls take turns as
    consumer_namespace: str | None = None
    #: its spec.serviceAccountName, whose identity reads the blobs without a connection string
    service_account: str | None = None
    #: ``namespace/name`` of the consumer that reads (None: a one-off read): the container
    #: client it leaves is closed once no other consumer reads over it
    consumer: str | None = None

    @classmethod
    def of_spec(
        cls,
        spec: specs.ConsumerSpec,
        *,
        connection_string: str | None,
        consumer_namespace: str,
        consumer: str,
    ) -> StoreAddress:
        """The address ``spec`` names, with the value its checkpoint Secret holds now."""
        return cls(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            consumer_group=spec.consumer_group,
            container_name=spec.checkpoint_container,
            connection_string=connection_string,
            account_url=spec.checkpoint_account_url or None,
            consumer_namespace=consumer_namespace,
            service_account=spec.service_account_name or None,
            consumer=consumer,
        )

    def blob_prefix(self, kind: str = checkpointblobs.CHECKPOINT) -> str:
        """The names of the consumer group's blobs of ``kind`` start with this."""
        return checkpointblobs.blob_prefix(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
            kind=kind,
        )
