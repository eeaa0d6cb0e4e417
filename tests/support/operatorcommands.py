"""The real ``ehb operator``, configured by its own flags, in a thread of the test process.

`cli.operator_cmd` builds the operator and its serving options from the flags exactly as the
command does; this runs that operator in `running.OperatorThread` so that a test can stop it.
Unlike `eventhub_balancer_devstack.clusters.start_operator` (the local stack's operator, which
lends its identity to every namespace), it has the install's defaults: its own identity lent
to no namespace, no binding, the public cloud's endpoints (plus what the flags add).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from eventhub_balancer.adapters import accessreviews, kubeapi
from eventhub_balancer.cli import operator_cmd
from eventhub_balancer.handlers import running


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    operator_cmd.add_arguments(parser)
    return parser.parse_args(list(flags))


@dataclasses.dataclass(frozen=True)
class StartedOperator:
    """A running ``ehb operator`` and the clients it was given."""

    thread: running.OperatorThread
    api: kubeapi.KubeAPI
    reviews: accessreviews.AccessReviews | None

    @property
    def metrics_port(self) -> int | None:
        return self.thread.metrics_port

    def stop(self) -> None:
        try:
            self.thread.stop()
        finally:
            if self.reviews is not None:
                self.reviews.close()
            self.api.close()


def start(kubeconfig: Path, *flags: str, secure_metrics: bool = False) -> StartedOperator:
    """``ehb operator FLAGS`` on the API server of ``kubeconfig``, its metrics on a free port
    of loopback: plain HTTP unless ``secure_metrics`` (HTTPS, TokenReview and
    SubjectAccessReview, as installed)."""
    defaults = ["--metrics-host=127.0.0.1", "--metrics-port=0"]
    if not secure_metrics:
        defaults.append("--metrics-insecure")
    args = parse(*defaults, *flags)
    api = kubeapi.KubeAPI.from_environment(str(kubeconfig))
    reviews = accessreviews.AccessReviews(api.configuration) if secure_metrics else None
    try:
        options = operator_cmd.serving_options(args, reviews=reviews)
        thread = running.OperatorThread(operator_cmd.operator_runtime(args, api), options)
        return StartedOperator(thread=thread.start(), api=api, reviews=reviews)
    except BaseException:
        if reviews is not None:
            reviews.close()
        api.close()
        raise
