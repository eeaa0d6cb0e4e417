"""Where an admin's command may send credentials: the operator's endpoint check, in the CLI.

``ehb checkpoints`` and ``ehb deadletters`` read a tenant's EventHubConsumer and connect where
it points, with the admin's own identity (``DefaultAzureCredential``) when it names an
``accountUrl`` or workload identity. A tenant who writes ``accountUrl: https://their-host``
would receive the admin's bearer token. So every command that builds a client first runs the
check the operator and the pods run (``contracts.endpoints``) on exactly the values it hands
to the SDK, with the operator's flags and the pods' environment variables. No module here
defines a command: the other CLI modules share it.

The local emulators pass by default here, unlike in the operator: only a connection string
(which carries its own key, never the admin's token) can name one, and an account URL must
be https under an allowed suffix whatever the flags say.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from eventhub_balancer.contracts import endpoints

#: The same variables ``ehb consume`` reads (consumer.settings), so one shell setting covers
#: both; comma-separated suffixes.
ENV_ALLOWED_EVENTHUB_SUFFIXES = endpoints.ENV_ALLOWED_EVENTHUB_SUFFIXES
ENV_ALLOWED_BLOB_SUFFIXES = endpoints.ENV_ALLOWED_BLOB_SUFFIXES
#: "false" refuses the local emulators too.
ENV_ALLOW_DEVELOPMENT_ENDPOINTS = "EHB_ALLOW_DEVELOPMENT_ENDPOINTS"

SETTING = (
    f"--allowed-eventhub-suffix / --allowed-blob-suffix, or env {ENV_ALLOWED_EVENTHUB_SUFFIXES} "
    f"/ {ENV_ALLOWED_BLOB_SUFFIXES} (the operator's chart value allowedEndpoints)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``ehb operator``'s allow-list, for a command that builds clients."""
    trust = parser.add_argument_group("where credentials may go (as the operator allows)")
    trust.add_argument(
        "--allowed-eventhub-suffix",
        action="append",
        default=[],
        metavar="SUFFIX",
        help=f"a DNS suffix Event Hubs hosts may have (repeatable; env "
        f"{ENV_ALLOWED_EVENTHUB_SUFFIXES}; default .servicebus.windows.net)",
    )
    trust.add_argument(
        "--allowed-blob-suffix",
        action="append",
        default=[],
        metavar="SUFFIX",
        help=f"a DNS suffix Blob hosts may have (repeatable; env {ENV_ALLOWED_BLOB_SUFFIXES}; "
        "default .blob.core.windows.net)",
    )


def policy(
    args: argparse.Namespace, env: Mapping[str, str] = os.environ
) -> endpoints.EndpointPolicy:
    """The allow-list from the flags, else the environment, else the public cloud's."""
    eventhub, blob = endpoints.configured_suffixes(
        getattr(args, "allowed_eventhub_suffix", None),
        getattr(args, "allowed_blob_suffix", None),
        env,
    )
    development = env.get(ENV_ALLOW_DEVELOPMENT_ENDPOINTS, "").strip().lower() != "false"
    return endpoints.EndpointPolicy(
        eventhub_suffixes=eventhub,
        blob_suffixes=blob,
        allow_development=development,
        setting=SETTING,
    )
