"""What a Dockerfile asks for, as steps a builder without Docker can take (pure).

The base image (`python:3.11-slim-bookworm`) becomes a Debian bookworm root filesystem with
Debian's Python 3.11. The builder stage becomes one step, `InstallVenv`: its `pip wheel` runs on
this machine (the network and the wheel cache are here), and the rest of its RUN (`python -m venv`,
`pip install --no-index`, `compileall`) runs in the image's own root filesystem, with the wheels
at the path the Dockerfile gives them; so the virtualenv is where `COPY --from=builder` puts it.
Every other instruction of the final stage keeps its Docker meaning.
"""

from __future__ import annotations

import dataclasses
import json
import shlex

from eventhub_balancer_devstack.images import dockerfiles

#: The environment of the base: Debian's default PATH and the UTF-8 locale the python images set.
BASE_ENV = (
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("LANG", "C.UTF-8"),
)
#: The only base this builder can stand in for: a Python 3.11 image on Debian bookworm.
BASE_PREFIX, BASE_RELEASE = "python:3.11", "bookworm"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContextCopy:
    """A builder COPY from the build context: repository paths into the context's folder."""

    sources: tuple[str, ...]  # relative to the repository root
    destination: str  # relative to the builder's WORKDIR


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """A RUN of the final stage, with the environment and working directory Docker gives it."""

    command: str
    env: tuple[tuple[str, str], ...]
    cwd: str

    @property
    def created_by(self) -> str:
        return f"RUN /bin/sh -c {self.command}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstallVenv:
    """`COPY --from=builder PATH PATH`: the builder's virtualenv, built in place."""

    path: str  # /opt/ehb
    wheel_dir: str  # where the builder's `pip wheel --wheel-dir` puts them: /wheels
    wheel_specs: tuple[str, ...]  # `pip wheel`'s arguments, run in the context folder
    context: tuple[ContextCopy, ...]
    command: str  # the builder's RUN without its `pip wheel`
    env: tuple[tuple[str, str], ...]  # the builder's, told to install from wheel_dir only

    @property
    def created_by(self) -> str:
        return f"COPY --from=builder {self.path} {self.path}"


Step = Run | InstallVenv


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageConfig:
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    user: str
    workdir: str
    exposed_ports: tuple[str, ...]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    reference: str  # NAME:TAG, as the Dockerfile's header builds it
    steps: tuple[Step, ...]
    config: ImageConfig


def recipe(text: str, *, version: str) -> Recipe:
    """The recipe of one Dockerfile; `version` is the tag (the product's version)."""
    parsed = dockerfiles.parse(text)
    final = parsed.final
    if not (final.base.startswith(BASE_PREFIX) and BASE_RELEASE in final.base):
        raise dockerfiles.DockerfileError(
            f"the final stage is FROM {final.base}; only {BASE_PREFIX}-*{BASE_RELEASE} is built"
        )
    env = dict(BASE_ENV)
    labels: dict[str, str] = {}
    steps: list[Step] = []
    user, workdir, exposed = "", "", []
    entrypoint: list[str] = []
    cmd: list[str] = []
    for instruction in final.instructions:
        keyword, arguments = instruction.keyword, instruction.arguments
        if keyword == "ENV":
            env.update(_pairs(arguments, env))
        elif keyword == "LABEL":
            labels.update(_pairs(arguments, None))
        elif keyword == "RUN":
            if user:
                raise dockerfiles.DockerfileError(f"line {instruction.line}: RUN after USER")
            steps.append(Run(command=arguments, env=tuple(env.items()), cwd=workdir or "/"))
        elif keyword == "COPY" and arguments.startswith("--from="):
            steps.append(_install_venv(parsed, instruction))
        elif keyword == "USER":
            user = arguments
        elif keyword == "WORKDIR":
            workdir = dockerfiles.expand(arguments, env)
        elif keyword == "EXPOSE":
            exposed += [p if "/" in p else f"{p}/tcp" for p in arguments.split()]
        elif keyword in ("ENTRYPOINT", "CMD"):
            (entrypoint if keyword == "ENTRYPOINT" else cmd)[:] = _exec_form(instruction)
        else:
            raise dockerfiles.DockerfileError(
                f"line {instruction.line}: {keyword} in the final stage is not built here"
            )
    config = ImageConfig(
        env=tuple(env.items()),
        labels=tuple(sorted(labels.items())),
        user=user,
        workdir=workdir,
        exposed_ports=tuple(exposed),
        entrypoint=tuple(entrypoint),
        cmd=tuple(cmd),
    )
    return Recipe(reference=f"{parsed.build_name}:{version}", steps=tuple(steps), config=config)


def _pairs(arguments: str, env: dict[str, str] | None) -> dict[str, str]:
    """`K=V K2="V 2"` (ENV and LABEL); ENV's values see the variables set before them."""
    found: dict[str, str] = {}
    for word in shlex.split(arguments):
        key, equals, value = word.partition("=")
        if not equals:
            raise dockerfiles.DockerfileError(f"{word!r}: only the KEY=VALUE form is built here")
        found[key] = value if env is None else dockerfiles.expand(value, env | found)
    return found


def _exec_form(instruction: dockerfiles.Instruction) -> list[str]:
    value = json.loads(instruction.arguments)
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise dockerfiles.DockerfileError(f"line {instruction.line}: only the exec form is built")
    return value


def _install_venv(parsed: dockerfiles.Dockerfile, copy: dockerfiles.Instruction) -> InstallVenv:
    words = copy.arguments.split()
    stage_name = words[0].removeprefix("--from=")
    if len(words) != 3 or words[1] != words[2]:
        raise dockerfiles.DockerfileError(
            f"line {copy.line}: only `COPY --from=STAGE PATH PATH` (the same path on both sides)"
        )
    builder = parsed.stage(stage_name)
    env = dict(BASE_ENV)
    context: list[ContextCopy] = []
    for instruction in builder.instructions:
        if instruction.keyword == "ENV":
            env.update(_pairs(instruction.arguments, env))
        elif instruction.keyword == "COPY":
            *sources, destination = instruction.arguments.split()
            context.append(ContextCopy(sources=tuple(sources), destination=destination))
        elif instruction.keyword == "RUN" and " wheel " in instruction.arguments:
            wheel_dir, specs, rest = _split_pip_wheel(instruction)
            env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=wheel_dir)
            return InstallVenv(
                path=words[1],
                wheel_dir=wheel_dir,
                wheel_specs=specs,
                context=tuple(context),
                command=rest,
                env=tuple(env.items()),
            )
    raise dockerfiles.DockerfileError(f"stage {stage_name!r} has no RUN with `pip wheel`")


def _split_pip_wheel(run: dockerfiles.Instruction) -> tuple[str, tuple[str, ...], str]:
    """(wheel dir, `pip wheel`'s arguments, the other commands of the `&&` chain)."""
    lexer = shlex.shlex(run.arguments, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token == "&&":
            commands.append([])
        elif token in (";", "|", "||", "&"):
            raise dockerfiles.DockerfileError(f"line {run.line}: only `&&` chains are built")
        else:
            commands[-1].append(token)
    wheel = [c for c in commands if len(c) > 2 and c[0].endswith("pip") and c[1] == "wheel"]
    if len(wheel) != 1:
        raise dockerfiles.DockerfileError(f"line {run.line}: expected one `pip wheel`")
    arguments = wheel[0][2:]
    if arguments[:1] != ["--wheel-dir"] or len(arguments) < 3:
        raise dockerfiles.DockerfileError(f"line {run.line}: `pip wheel --wheel-dir DIR SPEC...`")
    wheel_dir, specs = arguments[1], tuple(arguments[2:])
    if any(s.startswith("-") for s in specs):
        raise dockerfiles.DockerfileError(f"line {run.line}: `pip wheel` options are not built")
    # What the chain installs from the index (`pip install --upgrade pip`) is wheeled here too,
    # so that it installs offline from the wheel dir.
    for command in commands:
        if (
            command[0].endswith("pip")
            and command[1:2] == ["install"]
            and "--no-index" not in command
        ):
            specs += tuple(a for a in command[2:] if not a.startswith("-"))
    rest = " && ".join(shlex.join(c) for c in commands if c is not wheel[0])
    return wheel_dir, specs, rest
