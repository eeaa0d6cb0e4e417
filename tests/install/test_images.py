"""The images `make images` built (make test builds them first): their configuration is the
Dockerfile's, their files are where the Dockerfile puts them, their sizes are recorded and
bounded, and they run, with runc, as the charts run them: as uid 10001 on a read-only root
filesystem with an emptyDir at each path the Dockerfile's header names.

The Dockerfiles are read here with the static tests' own parser, not the builder's: the
builder could misread a Dockerfile the same way twice.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator

import pytest

from eventhub_balancer import __version__
from eventhub_balancer_devstack.images import dockerfiles, layouts, recipes, smoking
from tests.install import test_dockerfiles
from tests.support import loading

IMAGES_DIR = loading.ROOT / ".images"
LAYOUT = layouts.Layout(IMAGES_DIR / "oci")
#: What `make images` builds: short name -> Dockerfile.
BUILT = {
    "operator": test_dockerfiles.DOCKERFILES["operator"],
    "consumer": test_dockerfiles.DOCKERFILES["consumer"],
}
#: Bounds on the compressed (pushed) and unpacked sizes, about 25 % over the sizes of
#: docs/images.md: growth past them should be a decision, not an accident.
MAX_BYTES = {
    "operator": (115e6, 420e6),
    "consumer": (1070e6, 1960e6),
}
#: The emptyDirs of the charts' pods (the Dockerfiles' headers name them).
WRITABLE = {"operator": ("/tmp",), "consumer": ("/tmp", "/var/lib/ehb")}
#: Run in the image: how many installed modules have a .pyc that Python would not use (its
#: source's mtime or size differs from the one compiled). Each would be compiled again at every
#: start, in memory, since a read-only root filesystem keeps the .pyc from being written.
STALE_PYC_SCRIPT = """
import importlib.util, pathlib, struct, sys
stale = []
for source in pathlib.Path(sys.prefix, "lib").rglob("*.py"):
    compiled = pathlib.Path(importlib.util.cache_from_source(str(source)))
    if compiled.exists():
        flags, mtime, size = struct.unpack("<III", compiled.read_bytes()[4:16])
        info = source.stat()
        if flags == 0 and (mtime, size) != (int(info.st_mtime) & 0xFFFFFFFF, info.st_size):
            stale.append(str(source))
print(len(stale), *stale[:5])
"""


def reference(name: str) -> str:
    header = BUILT[name].read_text()
    match = re.search(r"docker build -f \S+ -t ([^\s:]+):\S+ \.", header)
    assert match, f"{BUILT[name]}: no `docker build -t` line in the header"
    return f"{match[1]}:{__version__}"


def built(name: str) -> layouts.Image:
    if reference(name) not in LAYOUT.tags():
        pytest.fail(f"{reference(name)} is not in {LAYOUT.path}: run `make images` first")
    return LAYOUT.describe(reference(name))


def final_stage(name: str) -> list[tuple[str, str]]:
    return test_dockerfiles.stages(BUILT[name])[-1]


@pytest.fixture(scope="module", params=sorted(BUILT))
def bundle(request: pytest.FixtureRequest) -> Iterator[tuple[str, smoking.Bundle]]:
    """Each image unpacked once for the file checks and the runs (a minute for the consumer)."""
    name = request.param
    built(name)
    with smoking.unpacked(
        LAYOUT, reference(name), writable=WRITABLE[name], scratch=IMAGES_DIR / "work" / "tests"
    ) as unpacked:
        yield name, unpacked


@pytest.mark.parametrize("name", sorted(BUILT))
def test_configuration_is_the_dockerfiles(name: str) -> None:
    config = built(name).config
    final = final_stage(name)
    last = {keyword: rest for keyword, rest in final}
    assert config["Entrypoint"] == json.loads(last["ENTRYPOINT"]) == ["ehb"]
    assert config["Cmd"] == json.loads(last["CMD"])
    assert config["User"] == last["USER"] == "10001:10001"
    assert config.get("WorkingDir", "") == last.get("WORKDIR", "")
    assert set(config["ExposedPorts"]) == {f"{p}/tcp" for p in last["EXPOSE"].split()}
    env = dict(e.split("=", 1) for e in config["Env"])
    for keyword, rest in final:
        for word in shlex.split(rest) if keyword == "ENV" else ():
            key, _, value = word.partition("=")
            assert env[key] == value.replace("$PATH", dict(recipes.BASE_ENV)["PATH"]), key
    assert env["PATH"].startswith("/opt/ehb/bin:")
    labels = dict(w.split("=", 1) for k, r in final if k == "LABEL" for w in shlex.split(r))
    assert config["Labels"] == labels


def test_sizes_are_recorded_and_bounded() -> None:
    record = json.loads((IMAGES_DIR / "images.json").read_text())
    for name, (max_compressed, max_unpacked) in MAX_BYTES.items():
        image = built(name)
        entry = record[image.reference]
        assert entry["digest"] == image.digest
        assert entry["compressedBytes"] == image.compressed_bytes <= max_compressed, name
        assert 0 < entry["unpackedBytes"] <= max_unpacked, name
        # The build's last layer holds the project's code and the user, not its dependencies.
        assert image.layers[-1].size < 5e6, name
    # One Debian base under both: a registry stores it once.
    assert built("operator").layers[0] == built("consumer").layers[0]


def test_files_are_where_the_dockerfile_puts_them(bundle: tuple[str, smoking.Bundle]) -> None:
    name, unpacked = bundle
    rootfs = unpacked.rootfs
    assert (rootfs / "opt/ehb/bin/ehb").is_file()
    interpreter = rootfs / "opt/ehb/bin/python"
    assert interpreter.is_symlink()
    assert (rootfs / "usr/bin/python3.11").is_file()
    passwd = (rootfs / "etc/passwd").read_text().splitlines()
    assert "ehb:x:10001:10001::/tmp:/usr/sbin/nologin" in passwd
    # Nothing of the build is left: no compilers, no wheels, no caches, no device nodes.
    for absent in ("usr/bin/gcc", "usr/bin/cc", "wheels", "root/.cache", "src"):
        assert not (rootfs / absent).exists(), absent
    assert not list((rootfs / "dev").iterdir())
    # The JRE's install scripts run a JVM, which leaves its perf data folder (a Docker build
    # leaves it too); the emptyDir mounted at /tmp hides it.
    assert {p.name for p in (rootfs / "tmp").iterdir()} <= {"hsperfdata_root"}
    assert not list((rootfs / "var/lib/apt/lists").glob("*_Packages"))
    if name == "consumer":
        java = (rootfs / "opt/java").readlink()
        assert (rootfs / str(java).lstrip("/") / "bin/java").is_file()
        conf = (rootfs / "opt/ehb/spark-conf/spark-defaults.conf").read_text()
        assert "spark.local.dir /var/lib/ehb/spark-local" in conf.splitlines()
        state = (rootfs / "var/lib/ehb").stat()
        assert (state.st_uid, state.st_gid) == (10001, 10001)
        assert list((rootfs / "opt/ehb/lib/python3.11/site-packages").glob("pyspark-*.dist-info"))


def test_runs_as_the_charts_run_it(bundle: tuple[str, smoking.Bundle]) -> None:
    name, unpacked = bundle
    version = unpacked.run(["ehb", "--version"], name=f"ehb-version-{name}")
    assert (version.returncode, version.stdout.strip()) == (0, f"ehb {__version__}"), version
    consume = unpacked.run(["ehb", "consume", "--help"], name=f"ehb-consume-{name}")
    assert consume.returncode == 0, consume
    assert "--handler MODULE:FUNCTION" in consume.stdout
    command = unpacked.run(
        ["ehb", *json.loads(dict(final_stage(name))["CMD"]), "--help"], name=f"ehb-cmd-{name}"
    )
    assert command.returncode == 0, command
    user = unpacked.run(["id", "-u"], name=f"ehb-id-{name}")
    assert user.stdout.strip() == "10001", user
    stale = unpacked.run(["python", "-c", STALE_PYC_SCRIPT], name=f"ehb-pyc-{name}")
    assert stale.returncode == 0, stale
    assert stale.stdout.split()[0] == "0", stale.stdout
    if name == "consumer":
        java = unpacked.run(["java", "-version"], name="ehb-java")
        assert java.returncode == 0, java
        assert 'version "17.' in java.stderr


def test_each_dockerfile_is_a_recipe_the_builder_follows() -> None:
    """All four Dockerfiles, so that one the builder cannot follow fails here, not at a build."""
    for name, path in test_dockerfiles.DOCKERFILES.items():
        recipe = recipes.recipe(path.read_text(), version=__version__)
        (venv,) = [s for s in recipe.steps if isinstance(s, recipes.InstallVenv)]
        assert venv.path == "/opt/ehb", name
        assert "pip wheel" not in venv.command, name
        assert venv.env[-2:] == (("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", venv.wheel_dir))
        assert recipe.config.entrypoint == ("ehb",), name


def test_an_instruction_the_builder_cannot_follow_is_refused() -> None:
    text = test_dockerfiles.DOCKERFILES["operator"].read_text()
    with pytest.raises(dockerfiles.DockerfileError, match="VOLUME in the final stage"):
        recipes.recipe(text.replace("USER 10001", "VOLUME /data\nUSER 10001"), version="1")
    with pytest.raises(dockerfiles.DockerfileError, match=r"only python:3\.11"):
        recipes.recipe(text.replace("slim-bookworm", "alpine"), version="1")
