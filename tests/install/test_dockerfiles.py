"""Static checks of the images (no Docker engine runs here): multi-stage, no build tools in the
final stage, a numeric non-root user, the `ehb` entry point, and every COPY source present in
the build context after .dockerignore."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from tests.support import loading

DOCKERFILES = {
    "operator": loading.ROOT / "docker" / "operator.Dockerfile",
    "consumer": loading.ROOT / "docker" / "consumer.Dockerfile",
    "consumer-connect": loading.ROOT / "docker" / "consumer-connect.Dockerfile",
    "orders-example": loading.ROOT / "examples" / "orders" / "Dockerfile",
}
#: The build command in the example Dockerfile's header; its tag is the one the manifests use.
BUILD_EXAMPLE = r"docker build -f examples/orders/Dockerfile -t (\S+) \."
BUILD_TOOLS = ("build-essential", "gcc", "g++", "make ", "-dev ")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", path.read_text())
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def stages(path: Path) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(path):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, rest))
    return found


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """Go's filepath.Match plus Docker's ``**`` (any number of directories, also none)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def ignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching .dockerignore pattern decides (``!`` re-includes)."""
    verdict = False
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if any(pattern_regex(pattern).match(p) for p in prefixes):
            verdict = not negate
    return verdict


def dockerignore() -> list[str]:
    lines = (loading.ROOT / ".dockerignore").read_text().splitlines()
    return [x.strip() for x in lines if x.strip() and not x.startswith("#")]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_multi_stage_with_a_clean_final_stage(image: str) -> None:
    built = stages(DOCKERFILES[image])
    assert len(built) >= 2
    final = built[-1]
    final_text = " ".join(rest for _, rest in final)
    for tool in BUILD_TOOLS:
        assert tool not in final_text, f"{tool.strip()} in the final stage"
    assert any(k == "COPY" and rest.startswith("--from=builder /opt/ehb") for k, rest in final)
    # The same Python in both stages: the venv's interpreter links stay valid.
    assert built[0][0][1].split()[0] == final[0][1].split()[0] == "${PYTHON_IMAGE}"


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_runs_as_a_numeric_non_root_user(image: str) -> None:
    final = stages(DOCKERFILES[image])[-1]
    users = [rest for k, rest in final if k == "USER"]
    assert users, "no USER in the final stage"
    uid = users[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) >= 10000
    # Nothing after USER needs root.
    last_user = max(i for i, (k, _) in enumerate(final) if k == "USER")
    assert not [k for k, _ in final[last_user:] if k == "RUN"]


@pytest.mark.parametrize(
    ("image", "command"),
    [
        ("operator", "operator"),
        ("consumer", "consume"),
        ("consumer-connect", "consume"),
        ("orders-example", "consume"),
    ],
)
def test_entry_point_is_the_ehb_console_script(image: str, command: str) -> None:
    final = stages(DOCKERFILES[image])[-1]
    entrypoint = [json.loads(rest) for k, rest in final if k == "ENTRYPOINT"]
    cmd = [json.loads(rest) for k, rest in final if k == "CMD"]
    assert entrypoint[-1] == ["ehb"]
    assert cmd[-1][0] == command
    pyproject = tomllib.loads((loading.ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["ehb"] == "eventhub_balancer.cli:main"


#: The chart whose default ``port`` each image serves on.
CHARTS = {
    "operator": "eventhub-balancer",
    "consumer": "eventhub-consumer",
    "consumer-connect": "eventhub-consumer",
    "orders-example": "eventhub-consumer",
}


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_the_exposed_port_is_the_one_the_chart_serves_on(image: str) -> None:
    import yaml

    values = loading.ROOT / "charts" / CHARTS[image] / "values.yaml"
    port = yaml.safe_load(values.read_text())["port"]
    exposed = [rest for k, rest in stages(DOCKERFILES[image])[-1] if k == "EXPOSE"]
    assert exposed == [str(port)], f"{DOCKERFILES[image].name} exposes {exposed}, serves {port}"


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_copy_sources_exist_in_the_build_context(image: str) -> None:
    patterns = dockerignore()
    for keyword, rest in instructions(DOCKERFILES[image]):
        if keyword not in ("COPY", "ADD") or "--from=" in rest:
            continue
        *sources, _destination = [a for a in rest.split() if not a.startswith("--")]
        for source in sources:
            path = loading.ROOT / source
            assert path.exists(), f"COPY {source}: missing"
            relative = source.rstrip("/")
            assert not ignored(relative, patterns), f"COPY {source}: excluded by .dockerignore"
            if path.is_dir():
                files = [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
                kept = [p for p in files if not ignored(str(p.relative_to(loading.ROOT)), patterns)]
                assert kept == files


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = dockerignore()
    for heavy in (
        ".venv",
        "node_modules",
        ".git",
        "tests",
        "operator/eventhub_balancer/__pycache__",
    ):
        assert ignored(heavy, patterns), heavy
    assert not ignored("pyproject.toml", patterns)


def test_consumer_image_carries_java_and_pyspark() -> None:
    text = re.sub(r"\\\n", " ", DOCKERFILES["consumer"].read_text())
    final = stages(DOCKERFILES["consumer"])[-1]
    final_text = " ".join(rest for _, rest in final)
    assert "openjdk-17-jre-headless" in final_text
    assert "'.[spark,otel]'" in text
    pyproject = tomllib.loads((loading.ROOT / "pyproject.toml").read_text())
    assert any(
        d.startswith("pyspark") for d in pyproject["project"]["optional-dependencies"]["spark"]
    )
    env = " ".join(rest for k, rest in final if k == "ENV")
    assert "PYSPARK_PYTHON=/opt/ehb/bin/python" in env
    assert "JAVA_HOME=/opt/java" in env
    # Spark writes only below the emptyDir mounts the image's header asks for.
    for path in re.findall(r"(/var/lib/ehb|/tmp)(?:/[\w-]+)*", final_text):
        assert path in documented_mounts("consumer")


def documented_mounts(image: str) -> set[str]:
    """The emptyDir mounts a Dockerfile's header asks a Deployment for (read-only root)."""
    header = DOCKERFILES[image].read_text().split("\nARG ", 1)[0]
    (line,) = [x for x in header.splitlines() if "emptyDir" in x]
    return set(re.findall(r"(/var/lib/ehb|/tmp)\b", header[header.index(line) :]))


def test_connect_image_has_no_java_and_installs_pyspark_client() -> None:
    """The Spark Connect variant: the pure-Python client, never pyspark (same module) or a JVM."""
    text = re.sub(r"\\\n", " ", DOCKERFILES["consumer-connect"].read_text())
    commands = " ".join(rest for k, rest in instructions(DOCKERFILES["consumer-connect"]))
    final = stages(DOCKERFILES["consumer-connect"])[-1]
    final_text = " ".join(rest for _, rest in final)
    for java in ("openjdk", "jre", "jdk", "JAVA_HOME", "java"):
        assert java not in final_text, f"{java} in the Spark Connect image"
    assert "'.[spark-connect,otel]'" in text
    assert "'eventhub-balancer[spark-connect,otel]'" in text
    # Neither the `spark` extra nor pyspark itself, in any stage.
    assert not re.search(r"[\[,]spark[,\]]", commands)
    assert not re.search(r"\bpyspark(?!-client)", commands)
    extras = tomllib.loads((loading.ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = [re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0] for d in extras["spark-connect"]]
    assert "pyspark-client" in names
    assert "pyspark" not in names
    env = " ".join(rest for k, rest in final if k == "ENV")
    assert "PYSPARK_PYTHON" not in env
    for path in re.findall(r"(/var/lib/ehb|/tmp)(?:/[\w-]+)*", final_text):
        assert path in documented_mounts("consumer-connect")


def test_the_example_deployment_runs_the_example_image() -> None:
    """manifests/examples/ works as shipped: its image is built by examples/orders/Dockerfile
    (the tag its header gives), which installs the example project's wheel, whose package has
    the handler module the Deployment's args name."""
    (deployment,) = [
        d.body
        for d in loading.file_documents(loading.MANIFESTS_DIR / "examples")
        if d.kind == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    dockerfile = DOCKERFILES["orders-example"].read_text()
    (tag,) = re.findall(BUILD_EXAMPLE, dockerfile)
    assert container["image"] == tag
    (handler,) = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--handler=")]
    module = handler.split(":")[0]
    project = loading.ROOT / "examples" / "orders"
    packages = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    assert module.split(".")[0] in packages
    assert (project / (module.replace(".", "/") + ".py")).is_file()
    copied = [rest for k, rest in instructions(DOCKERFILES["orders-example"]) if k == "COPY"]
    assert "examples/orders/orders/ examples/orders/orders/" in copied
    (built,) = [rest for k, rest in stages(DOCKERFILES["orders-example"])[0] if "pip wheel" in rest]
    assert "./examples/orders" in built
    assert "orders-example" in built.split("pip install --no-index", 1)[1]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert documented_mounts("orders-example") <= mounts


def test_ignored_follows_the_last_matching_pattern() -> None:
    assert ignored("a/b.py", ["*"])
    assert not ignored("a/b.py", ["*", "!a/"])
    assert ignored("a/__pycache__/x.pyc", ["*", "!a/", "a/**/__pycache__"])


def test_the_e2e_workflow_builds_the_example_image_under_its_tag() -> None:
    import yaml

    workflow = yaml.safe_load((loading.ROOT / ".github" / "workflows" / "e2e.yaml").read_text())
    (tag,) = re.findall(
        BUILD_EXAMPLE,
        DOCKERFILES["orders-example"].read_text(),
    )
    assert workflow["env"]["ORDERS_EXAMPLE_IMAGE"] == tag
