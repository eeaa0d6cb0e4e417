"""``ehb checkpoints export NAME > file.json``: a consumer group's checkpoints, as a backup.

Before a reset, a migration to another hub or consumer group, or an experiment, the positions
are saved in a file that ``ehb checkpoints import`` reads back. It reads only, so it needs no
pause; the file holds positions, owners and epochs, never a credential. It reads with the
identity the EventHubConsumer declares (`actingidentities`).
"""

from __future__ import annotations

import argparse
import datetime
import json

from eventhub_balancer.cli import checkpoints, consumertargets

COMMAND = ("checkpoints", "export")
HELP = "print an EventHubConsumer's checkpoints as JSON (for `ehb checkpoints import`)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    consumertargets.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from eventhub_balancer.adapters import checkpointdocuments, kubeapi

    async def export() -> checkpointdocuments.ExportDocument:
        api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
        try:
            consumer = await consumertargets.read_consumer(
                api,
                args,
                namespace=consumertargets.consumer_namespace(args),
                name=args.name,
                eventhub=False,  # only the checkpoint store is read
            )
        finally:
            api.close()
        spec = consumer.spec
        listed = await checkpoints.list_checkpoints(consumer, owner_id="ehb-checkpoints-export")
        return checkpointdocuments.export_document(
            listed,
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            consumer_group=spec.consumer_group,
            now=datetime.datetime.now(datetime.UTC),
        )

    print(json.dumps(asyncio.run(export()), indent=2))
    return 0
