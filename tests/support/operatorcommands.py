"""The real ``ehb operator``, configured by its own flags, in a thread of the test process.

`cli.operator_cmd` builds the operator and its serving options from the flags exactly as the
command does; this runs that operator in `running.OperatorThread` so that a test can stop it.
Unlike `eventhub_balancer_devstack.clusters.start_operator` (the local stack's operator, which
lends its identity to every namespace), it has the install's defaults: its own identity lent
to no namespace, no binding, the public cloud's endpoints (plus what the flags add).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eventhub_balancer.adapters import kubeapi
from eventhub_balancer.cli import operator_cmd
from eventhub_balancer.handlers import running


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    operator_cmd.add_arguments(parser)
    return parser.parse_args(list(flags))


def start(kubeconfig: Path, *flags: str) -> running.OperatorThread:
    """``ehb operator FLAGS`` on the API server of ``kubeconfig``, with metrics on a free port
    of loopback unless the flags say otherwise."""
    args = parse("--metrics-host=127.0.0.1", "--metrics-port=0", *flags)
    options = operator_cmd.serving_options(args)
    api = kubeapi.KubeAPI.from_environment(str(kubeconfig))
    try:
        return running.OperatorThread(operator_cmd.operator_runtime(args, api), options).start()
    except BaseException:
        api.close()
        raise
