"""``ehb local spark-connect``: run a Spark Connect server until interrupted.

A consumer with ``--spark-remote`` (the consumer chart's ``spark.remote``) needs a Spark Connect
server; pyspark's distribution has one, but starting it takes its class, its jar and a few
settings for loopback. This prints its ``sc://`` URL first (so scripts can read one line) and
stops the server (its JVM and the executors it forked) on Ctrl-C or SIGTERM. Its log is
``connect.log`` in ``--log-dir``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eventhub_balancer.cli import flagtypes
from eventhub_balancer_devstack.commands import stopping

COMMAND = ("local", "spark-connect")
HELP = "run a Spark Connect server on 127.0.0.1 and print its sc:// URL (for --spark-remote)"
#: Spark Connect's own default port, so that ``sc://127.0.0.1:15002`` can be written down.
DEFAULT_PORT = 15002


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=flagtypes.port(),
        default=DEFAULT_PORT,
        help=f"the gRPC port (default {DEFAULT_PORT}, Spark Connect's; 0: a free one)",
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="where the server runs its jobs: local[N] or spark://HOST:PORT (default local[2])",
    )
    parser.add_argument(
        "--driver-memory", default="1g", help="the server's JVM heap (default 1g), as spark-submit"
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="keep the server's log and scratch files here (default: a temporary folder)",
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer import errors
    from eventhub_balancer.spark import flags
    from eventhub_balancer_devstack import sparkcluster
    from eventhub_balancer_devstack.commands import demo
    from eventhub_balancer_devstack.realkube import processes

    if args.master.strip().startswith("sc://"):
        raise errors.InvalidInput(
            "--master",
            f"{args.master!r} is a Spark Connect URL, which this command serves: give where "
            "the server runs its jobs, local[N] or spark://HOST:PORT",
        )
    try:
        flags.validate_master(args.master)
    except errors.InvalidInput as e:
        raise errors.InvalidInput("--master", e.problem) from None
    demo.check_directory(args.log_dir, flag="--log-dir")
    # A port taken is said before the JVM starts, which would take seconds to fail on it.
    if args.port and not processes.port_is_free(args.port):
        raise errors.ConfigurationError(
            f"--port: 127.0.0.1:{args.port} is taken: choose another --port, or 0 for a free one"
        )
    # The stop comes first: a Ctrl-C while the JVM starts stops it.
    with (
        stopping.stopping_cleanly("the Spark Connect server"),
        sparkcluster.connect_server(
            master=args.master,
            driver_memory=args.driver_memory,
            log_dir=args.log_dir,
            port=args.port,
        ) as server,
    ):
        process = server.process

        def announce() -> None:
            print(server.url, flush=True)
            print(
                f"Spark Connect server at {server.url} (master {args.master}, its log "
                f"{server.log_dir / 'connect.log'}); give it to a consumer as --spark-remote "
                "(the consumer chart's spark.remote); Ctrl-C stops it",
                file=sys.stderr,
                flush=True,
            )

        return stopping.serve(
            poll_s=0.5,
            ended=lambda: process is not None and not process.running,
            what="the Spark Connect server",
            announce=announce,
        )
