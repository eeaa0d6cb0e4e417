"""``ehb local up``: the whole local stack (Event Hubs emulator, Azurite, Kubernetes API).

It prints how to reach each service and runs until Ctrl-C or SIGTERM, then stops all three
(`stopping`: a signal while it starts stops what started; a second one prints where each
thread is).
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eventhub_balancer import errors
from eventhub_balancer.cli import flagtypes
from eventhub_balancer_devstack.commands import stopping

if TYPE_CHECKING:
    from eventhub_balancer_devstack import consumersetups, stacks

COMMAND = ("local", "up")
HELP = "run the Event Hubs emulator, Azurite and a local Kubernetes API together"
#: The group's line in ``ehb --help``.
GROUP_HELP = "run the local stack on 127.0.0.1, each part alone or all together (up)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hub",
        action="append",
        default=[],
        metavar="NAME=PARTITIONS",
        help="a hub and its partition count (repeatable; default orders=32)",
    )
    parser.add_argument(
        "--eventhubs-port", type=flagtypes.port(), default=5672, help="AMQP port (0: a free one)"
    )
    parser.add_argument(
        "--blob-port", type=flagtypes.port(), default=10000, help="Azurite's port (0: a free one)"
    )
    parser.add_argument(
        "--kube-port", type=flagtypes.port(), default=16443, help="the API's port (0: a free one)"
    )
    parser.add_argument(
        "--blob-location",
        type=Path,
        default=None,
        help="keep blobs in this directory across restarts (default: in memory)",
    )
    parser.add_argument(
        "--kube",
        default="local",
        choices=("local", "real"),
        help="local: the local API in this process (default); real: the real control plane "
        "(etcd, kube-apiserver, kube-controller-manager; `make controlplane` builds it)",
    )
    parser.add_argument(
        "--consumer",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help="prepare a consumer (repeatable): its namespace, the Secrets NAME-eh and "
        "NAME-blob with the emulators' connection strings, the checkpoint container; prints "
        "the EventHubConsumer to apply and the operator's command line",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".ehb"),
        help="where the kubeconfig is written (default: .ehb)",
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack import azurite, consumersetups, stacks
    from eventhub_balancer_devstack.commands import demo, local_eventhubs

    hubs = local_eventhubs.parse_hubs(args.hub) or {"orders": 32}
    setups = consumersetups.parse_all(args.consumer, dict(hubs))
    for flag in ("eventhubs_port", "blob_port", "kube_port"):
        port, name = getattr(args, flag), "--" + flag.replace("_", "-")
        if port and azurite.taken("127.0.0.1", port):
            # Before anything starts: a service that answers on a taken port (another stack's
            # Azurite) would pass for ours, and our kubeconfig would replace the other's.
            raise errors.ConfigurationError(
                f"{name}: 127.0.0.1:{port} is taken (another `ehb local up`?): "
                f"choose another {name}, or 0 for a free one"
            )
    # Before anything starts: a --state-dir that is a file ended the run in mkdir's error
    # once the services were up, blamed on the ports.
    demo.check_directory(args.state_dir, flag="--state-dir")
    demo.check_directory(args.blob_location, flag="--blob-location")
    options = stacks.StackOptions(
        hubs=hubs,
        eventhubs_port=args.eventhubs_port,
        blob_port=args.blob_port,
        kube_port=args.kube_port,
        blob_location=args.blob_location,
        state_dir=args.state_dir,
        kube=args.kube,
        node_images=stacks.project_images() if args.kube == "real" else None,
    )
    with stopping.stopping_cleanly("the local stack"):
        return _serve(options, setups)


def _serve(options: stacks.StackOptions, setups: list[consumersetups.ConsumerSetup]) -> int:
    """Start the stack, print how to use it, and serve until a signal (exit 0) or Azurite's
    end (exit 1). A signal while it starts stops what started and ends in KeyboardInterrupt."""
    from eventhub_balancer_devstack import consumersetups, stacks

    try:
        stack = stacks.LocalStack(options).start()
    except OSError as e:
        hint = (
            " (a port is taken: choose others with --eventhubs-port/--blob-port/--kube-port, "
            "or 0 for free ones)"
            if e.errno == errno.EADDRINUSE
            else ""
        )
        raise errors.ConfigurationError(f"cannot start the local stack: {e}{hint}") from e
    try:
        for line in stack.describe():
            print(line, flush=True)
        for setup in setups:
            consumersetups.prepare(stack, setup)
        for line in consumersetups.describe(stack, setups):
            print(line, flush=True)
        print("Ctrl-C or SIGTERM stops everything.", flush=True)
        return stopping.serve(poll_s=0.5, ended=lambda: not stack.azurite.running, what="Azurite")
    except KeyboardInterrupt:  # while the consumers were prepared
        return 0
    finally:
        stack.stop()
        print("stopped", file=sys.stderr)
