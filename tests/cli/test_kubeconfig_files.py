"""A kubeconfig ``ehb`` cannot use is one line naming the file and what to change, for every
command that reads one, not a traceback from the YAML parser or the Kubernetes client.

Two readers: `kubecontexts` (the namespace ``-n`` defaults to; exit 2, naming the flag) and
the Kubernetes client (`kubeclients`, the rest of the file; exit 1, a configuration error).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventhub_balancer import cli, errors
from eventhub_balancer.cli import kubecontexts

#: Valid YAML, and what kubectl would call a kubeconfig but for its clusters and users.
WRONG_SHAPE = (
    "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    "clusters: 5\nusers: 5\n"
)
#: The commands that read a kubeconfig, with ``-n`` (so only the client reads it).
COMMANDS = [
    ("status",),
    ("checkpoints", "list", "orders"),
    ("deadletters", "list", "orders"),
]


#: A file nested deeper than YAML's parser recurses at Python's default recursion limit (it
#: fails from about 600 levels): 10,000 took the parser 2 s a command, for the same refusal.
TOO_DEEP = b"[" * 1_000
#: Python's default recursion limit, which an `ehb` process runs with.
DEFAULT_RECURSION_LIMIT = 1_000


@pytest.fixture(autouse=True)
def default_recursion_limit() -> Iterator[None]:
    """The commands run here at the recursion limit of a user's `ehb` process. A test
    worker's limit can be higher: Hypothesis raises it while its tests run, and in one full
    run a worker's limit was high enough that 1,000 levels parsed (and were refused as YAML
    cut short, not as too deep)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(DEFAULT_RECURSION_LIMIT)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def ehb(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = cli.main(list(argv))
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            b"current-context: \xff\n",
            "is not UTF-8 text, as kubectl writes it: save it as UTF-8, or point --kubeconfig / "
            "KUBECONFIG at another",
        ),
        (
            TOO_DEEP,
            "is nested too deeply to be a kubeconfig: point --kubeconfig / KUBECONFIG at another",
        ),
    ],
)
def test_a_kubeconfig_the_namespace_cannot_be_read_from_names_the_flag(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "config"
    path.write_bytes(content)
    with pytest.raises(errors.InvalidInput) as caught:
        kubecontexts.default_namespace(str(path), {})
    assert (caught.value.field, caught.value.problem) == ("--kubeconfig", f"{path} {problem}")


def test_a_kubeconfig_that_is_not_utf8_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config"
    path.write_bytes(b"current-context: \xff\n")
    status, err = ehb(capsys, "checkpoints", "list", "orders", "--kubeconfig", str(path))
    assert status == 2
    assert err.startswith(f"ehb: error: --kubeconfig: {path} is not UTF-8 text")


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    "content",
    [WRONG_SHAPE.encode(), b"current-context: \xff\n", TOO_DEEP],
    ids=["clusters: 5", "not UTF-8", "nested"],
)
def test_a_kubeconfig_the_client_cannot_load_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...], content: bytes
) -> None:
    path = tmp_path / "config"
    path.write_bytes(content)
    status, err = ehb(capsys, *command, "-n", "shop", "--kubeconfig", str(path))
    assert status == 1
    (line,) = err.splitlines()
    assert line.startswith(
        f"ehb: error: cannot load the kubeconfig {path}: it is not shaped as a kubeconfig ("
    )
    assert line.endswith(
        "check its clusters, contexts and users against `kubectl config view`, or point "
        "--kubeconfig / KUBECONFIG at another"
    )


#: `ehb operator` too: started before `ehb local up`, kopf retried the API server for about a
#: minute, an ERROR line a try, then ended in a screenful of tracebacks.
OPERATOR = ("operator", "--standalone", "--metrics-port", "0")


@pytest.mark.parametrize("command", [*COMMANDS, OPERATOR], ids=lambda c: " ".join(c[:2]))
def test_an_api_server_that_is_down_is_one_line_that_says_where_to_look(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """A process of its own, as a user runs it: the client's retries logged a WARNING each
    (three lines) before an error that quoted urllib3's MaxRetryError."""
    import socket
    import subprocess
    import sys

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        path = tmp_path / "config"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
            f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
        )
        argv = [sys.executable, "-m", "eventhub_balancer", *command, "-n", "shop"]
        result = subprocess.run(
            [*argv, "--kubeconfig", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == cli.EXIT_UNAVAILABLE  # 1 is for what the API server says
    (line,) = result.stderr.splitlines()
    assert line.startswith("ehb: error: ")
    assert (
        f"cannot reach the Kubernetes API server at http://127.0.0.1:{port} (connection "
        "refused): is it running, and is the kubeconfig's current context the cluster you "
        "mean?" in line
    )


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("given", ["flag", "KUBECONFIG", "none"])
def test_a_kubeconfig_that_is_not_there_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
    given: str,
) -> None:
    """In a second shell, without the ``export KUBECONFIG=.ehb/kubeconfig`` that `ehb local up`
    prints (or with a path misspelt), the client's ``Invalid kube-config file. No
    configuration found.`` was all ``ehb`` said of a file that does not exist."""
    missing = tmp_path / ".ehb" / "kubeconfg"
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    import kubernetes.config.kube_config

    # No ~/.kube/config either (the client's default, read at its import).
    monkeypatch.setattr(
        kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none")
    )
    flags: tuple[str, ...] = ()
    if given == "flag":
        flags = ("--kubeconfig", str(missing))
    elif given == "KUBECONFIG":
        monkeypatch.setenv("KUBECONFIG", str(missing))
    shown = "~/.kube/config" if given == "none" else str(missing)
    status, err = ehb(capsys, *command, "-n", "shop", *flags)
    assert status == 1
    (line,) = err.splitlines()
    assert line == (
        f"ehb: error: cannot load the kubeconfig {shown}: there is no such file: point "
        "--kubeconfig or KUBECONFIG at one (`ehb local up` writes .ehb/kubeconfig)"
    )


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_kubeconfig_that_is_a_directory_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    """``--kubeconfig .ehb`` (the folder `ehb local up` writes into, for the file in it) was
    Python's words: ``[Errno 21] Is a directory: '.ehb'``."""
    status, err = ehb(capsys, *command, "-n", "shop", "--kubeconfig", str(tmp_path))
    assert status == 1
    (line,) = err.splitlines()
    assert line == (
        f"ehb: error: cannot load the kubeconfig {tmp_path}: it is a directory: point "
        "--kubeconfig or KUBECONFIG at a kubeconfig file"
    )


def test_a_kubeconfig_that_cannot_be_read_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file without read permission (faked: the tests may run as root, who reads any)."""
    import kubernetes.config

    path = tmp_path / "config"
    path.write_text("apiVersion: v1\nkind: Config\n")

    def denied(**_: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(kubernetes.config, "load_kube_config", denied)
    status, err = ehb(capsys, "status", "-n", "shop", "--kubeconfig", str(path))
    assert status == 1
    assert err.splitlines() == [
        f"ehb: error: cannot load the kubeconfig {path}: it cannot be read (Permission denied): "
        "point --kubeconfig or KUBECONFIG at a kubeconfig file"
    ]
