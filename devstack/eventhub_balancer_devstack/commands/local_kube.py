"""``ehb local kube``: a local Kubernetes API server for kopf, the operator and the client.

``--real`` starts the real control plane instead (etcd, kube-apiserver and
kube-controller-manager as processes, built by ``make controlplane``). Prints the path of a
kubeconfig for it on the first line (scripts read that line), then a hint for the shell, and
serves until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eventhub_balancer.cli import flagtypes
from eventhub_balancer_devstack.commands import stopping

if TYPE_CHECKING:
    from eventhub_balancer_devstack import kubeservers

COMMAND = ("local", "kube")
HELP = "run a local Kubernetes API server (no cluster needed) and write a kubeconfig for it"

#: Where ``--real`` writes its kubeconfig unless --kubeconfig says otherwise.
DEFAULT_REAL_KUBECONFIG = Path(".ehb") / "real-kube" / "kubeconfig"

#: Where the kubeconfig goes unless --kubeconfig says otherwise (never ~/.kube/config: a
#: user's real cluster configuration must not be overwritten by a demo).
DEFAULT_KUBECONFIG = Path(".ehb") / "local-kube" / "kubeconfig"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=flagtypes.port(),
        default=0,
        help="the port on 127.0.0.1 (default: a free one)",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help=f"where to write the kubeconfig (default: {DEFAULT_KUBECONFIG}, "
        f"with --real {DEFAULT_REAL_KUBECONFIG})",
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="start the real control plane (etcd, kube-apiserver, kube-controller-manager; "
        "`make controlplane` builds it) instead of the local API",
    )
    parser.add_argument(
        "--crds",
        type=Path,
        default=None,
        help="a directory of CRD YAML files to install (default: the repository's crds/)",
    )
    parser.add_argument(
        "--namespace",
        type=flagtypes.namespace_name,
        default="default",
        help="the kubeconfig context's namespace",
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer import errors
    from eventhub_balancer_devstack import kubeservers

    if args.crds is not None and not args.crds.is_dir():
        raise errors.InvalidInput("--crds", f"{args.crds} is not a directory")

    kind: kubeservers.Kind = "real" if args.real else "local"
    kubeconfig = args.kubeconfig or (DEFAULT_REAL_KUBECONFIG if args.real else DEFAULT_KUBECONFIG)
    if kubeconfig.is_dir():  # '' is the current directory
        raise errors.InvalidInput(
            "--kubeconfig", f"{kubeconfig} is a directory: give the path of a file to write"
        )
    api = kubeservers.server(kind, port=args.port, crds_dir=args.crds)
    # The stop comes first: a Ctrl-C while the control plane starts stops what started.
    with stopping.stopping_cleanly("the Kubernetes API"):
        try:
            return _serve(api, args.port, kubeconfig, args.namespace)
        finally:
            api.stop()


def _serve(api: kubeservers.KubeServer, port: int, kubeconfig: Path, namespace: str) -> int:
    """Start the API, write its kubeconfig, and serve until a signal (exit 0)."""
    from eventhub_balancer import errors

    try:
        api.start()
    except OSError as e:
        problem = "is taken" if e.errno == errno.EADDRINUSE else f"cannot be listened on ({e})"
        raise errors.ConfigurationError(
            f"--port: 127.0.0.1:{port} {problem}: choose another --port, or 0 for a free one"
        ) from e
    try:
        path = api.write_kubeconfig(kubeconfig, namespace=namespace).resolve()
    except OSError as e:
        where = f"{e.filename}: " if e.filename and str(e.filename) != str(kubeconfig) else ""
        raise errors.ConfigurationError(
            f"--kubeconfig: cannot write {kubeconfig} ({where}{e.strerror}): give a path "
            "you may write"
        ) from e

    def announce() -> None:
        print(path, flush=True)
        print(f"export KUBECONFIG={path}", flush=True)
        print(f"# serving {api.url}; Ctrl-C to stop", file=sys.stderr, flush=True)

    return stopping.serve(poll_s=1.0, announce=announce)
