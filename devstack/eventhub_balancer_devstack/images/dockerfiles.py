"""A Dockerfile as its stages and instructions (pure: text in, data out).

Only what the project's Dockerfiles use is understood: continuation lines, comment lines
(also inside a continued instruction, as Docker drops them), `ARG` defaults before the first
`FROM`, and `FROM IMAGE [AS NAME]`. The meaning of each instruction is `recipes`' concern.
"""

from __future__ import annotations

import dataclasses
import re

#: `docker build ... -t NAME:TAG .` in a Dockerfile's header comment: the tag Docker users give.
BUILD_TAG = re.compile(r"docker build -f \S+ -t (?P<name>[^\s:]+):(?P<tag>\S+) \.")


class DockerfileError(ValueError):
    """A Dockerfile this builder cannot follow; the message names the line."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Instruction:
    keyword: str  # upper case: RUN, ENV, ...
    arguments: str  # continuation lines joined with one space
    line: int  # where the instruction starts, 1-based


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stage:
    base: str  # FROM's image, ARGs expanded
    name: str | None  # FROM ... AS name
    instructions: tuple[Instruction, ...]  # after FROM


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dockerfile:
    args: dict[str, str]  # ARG defaults declared before the first FROM
    stages: tuple[Stage, ...]
    build_name: str  # the image name of the header's `docker build -t NAME:TAG`

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise DockerfileError(f"no stage named {name!r}")


def instructions(text: str) -> list[Instruction]:
    """Every instruction, with its continuation lines joined and comment lines dropped."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if not pending:
            start = number
        continued = line.endswith("\\")
        pending.append(line[:-1].strip() if continued else line)
        if not continued:
            keyword, _, rest = " ".join(p for p in pending if p).partition(" ")
            found.append(Instruction(keyword=keyword.upper(), arguments=rest.strip(), line=start))
            pending = []
    if pending:
        raise DockerfileError(f"line {start}: the last instruction ends with a backslash")
    return found


def parse(text: str) -> Dockerfile:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    current: list[Instruction] = []
    header: tuple[str, str | None] | None = None
    for instruction in instructions(text):
        if instruction.keyword == "ARG" and header is None:
            name, _, default = instruction.arguments.partition("=")
            args[name.strip()] = default.strip()
        elif instruction.keyword == "FROM":
            if header is not None:
                stages.append(Stage(base=header[0], name=header[1], instructions=tuple(current)))
            header, current = _from(instruction, args), []
        elif header is None:
            raise DockerfileError(f"line {instruction.line}: {instruction.keyword} before FROM")
        else:
            current.append(instruction)
    if header is None:
        raise DockerfileError("no FROM")
    stages.append(Stage(base=header[0], name=header[1], instructions=tuple(current)))
    tag = BUILD_TAG.search(text)
    if tag is None:
        raise DockerfileError("the header has no `docker build -f ... -t NAME:TAG .` line")
    return Dockerfile(args=args, stages=tuple(stages), build_name=tag["name"])


def _from(instruction: Instruction, args: dict[str, str]) -> tuple[str, str | None]:
    words = instruction.arguments.split()
    if len(words) == 3 and words[1].upper() == "AS":
        return expand(words[0], args), words[2]
    if len(words) == 1:
        return expand(words[0], args), None
    raise DockerfileError(f"line {instruction.line}: FROM {instruction.arguments!r}")


def expand(value: str, variables: dict[str, str]) -> str:
    """Docker's `$NAME` and `${NAME}` substitution (an unknown name becomes empty, as in Docker)."""
    return re.sub(
        r"\$(?:\{(\w+)\}|(\w+))",
        lambda m: variables.get(m[1] or m[2], ""),
        value,
    )
