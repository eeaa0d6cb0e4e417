"""The scenario format: JSON-like bodies in and out of the planner, checked field by field.

`ehb plan`, the tests' scenario files and other tools exchange scenarios and plans in this
format, so it is kept exactly (see docs/planner.md, Scenario format). Parsing is strict: an
unknown key, a wrong type or an impossible value raises `errors.InvalidInput` naming the field
(``members[2].state``, ``assignment["7"].epoch``), because a silently ignored typo in a
scenario gives a plan for a different question.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict, TypeVar

from eventhub_balancer import errors
from eventhub_balancer.balancing import models


class MemberBody(TypedDict):
    name: str
    state: NotRequired[str]  # default "ready"
    since: NotRequired[float]  # default 0
    weight: NotRequired[float]  # default 1
    starting: NotRequired[bool]  # default false
    outgoing: NotRequired[bool]  # default false
    restarted: NotRequired[bool]  # default false


class OwnershipBody(TypedDict):
    owner: str | None
    epoch: int
    state: NotRequired[str]  # default "owned"
    since: NotRequired[float]  # default 0


class OptionsBody(TypedDict, total=False):
    podGraceSeconds: float
    handoffTimeoutSeconds: float
    releaseWaitSeconds: float
    maxMovesPerCycle: int
    weighting: str
    lagTolerance: float


class ScenarioBody(TypedDict):
    partitions: list[str]
    members: list[MemberBody]
    assignment: NotRequired[dict[str, OwnershipBody]]
    released: NotRequired[dict[str, int]]
    lag: NotRequired[dict[str, int]]
    idle: NotRequired[list[str]]
    now: NotRequired[float]
    options: NotRequired[OptionsBody]


MoveBody = TypedDict(
    "MoveBody",
    {"partition": str, "from": str | None, "to": str | None, "epoch": int, "kind": str},
)


class PlanBody(TypedDict):
    assignment: dict[str, OwnershipBody]
    moves: list[MoveBody]
    balanced: bool
    targets: dict[str, int]


_Choice = TypeVar("_Choice", bound=str)

# The keys each body takes, in the order an error lists them: the bodies' own.
_SCENARIO_KEYS = tuple(ScenarioBody.__annotations__)
_MEMBER_KEYS = tuple(MemberBody.__annotations__)
_OWNERSHIP_KEYS = tuple(OwnershipBody.__annotations__)
_OPTION_KEYS = tuple(OptionsBody.__annotations__)


def load(text: str) -> models.Scenario:
    """Parse a scenario from JSON text."""
    return parse(decode(text))


def decode(text: str) -> object:
    """JSON text to plain data; a syntax error names its line and column."""

    def reject_constant(name: str) -> object:
        raise ValueError(f"{name} is not a number JSON allows")

    try:
        return json.loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as e:
        raise errors.InvalidInput(
            "scenario", f"malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from e
    except ValueError as e:
        raise errors.InvalidInput("scenario", str(e)) from e


def parse(raw: object) -> models.Scenario:
    """Check a decoded scenario body and build the `Scenario` it describes."""
    body = _object(raw, "scenario", _SCENARIO_KEYS)
    for key, example in (
        ("partitions", 'the hub\'s partition ids, as ["0", "1", "2", "3"]'),
        ("members", 'the pods to balance over, as [{"name": "c-0"}, {"name": "c-1"}]'),
    ):
        if key not in body:  # with its shape: "members: required" alone was a riddle
            raise errors.InvalidInput(key, f"required: {example}")

    partitions: list[models.PartitionId] = []
    seen_partitions: dict[str, int] = {}
    for i, item in enumerate(_list(body["partitions"], "partitions")):
        p = _name(item, f"partitions[{i}]")
        if p in seen_partitions:
            raise errors.InvalidInput(
                f"partitions[{i}]",
                f"duplicate partition id {p!r} (also partitions[{seen_partitions[p]}])",
            )
        seen_partitions[p] = i
        partitions.append(models.PartitionId(p))

    members: list[models.Member] = []
    seen_members: dict[str, int] = {}
    for i, item in enumerate(_list(body["members"], "members")):
        member = _member(item, f"members[{i}]")
        first = seen_members.get(member.name)
        if first is not None:
            raise errors.InvalidInput(
                f"members[{i}].name",
                f"duplicate member name {member.name!r} (also members[{first}])",
            )
        seen_members[member.name] = i
        members.append(member)

    assignment = {
        models.PartitionId(p): _ownership(value, f"assignment[{json.dumps(p)}]")
        for p, value in _object(body.get("assignment", {}), "assignment").items()
    }
    released = {
        models.PartitionId(p): _count(value, f"released[{json.dumps(p)}]")
        for p, value in _object(body.get("released", {}), "released").items()
    }
    lag = {
        models.PartitionId(p): _count(value, f"lag[{json.dumps(p)}]")
        for p, value in _object(body.get("lag", {}), "lag").items()
    }
    idle = [_name(p, f"idle[{i}]") for i, p in enumerate(_list(body.get("idle", []), "idle"))]
    return models.Scenario(
        partitions=tuple(partitions),
        members=tuple(members),
        assignment=assignment,
        released=released,
        lag=lag,
        idle=frozenset(models.PartitionId(p) for p in idle),
        now=_number(body.get("now", 0), "now"),
        options=_options(body.get("options", {})),
    )


#: The most partitions, and pods, a fresh start is planned for: the operator takes partition
#: ids of at most five digits (`contracts.bounds`). A typo with more zeros is refused at once
#: instead of taking seconds and gigabytes to plan.
FRESH_LIMIT = 100_000


def fresh(*, partition_count: int, member_count: int) -> models.Scenario:
    """A fresh start: partitions "0".."P-1", ready members pod-0..pod-(N-1), nothing owned."""
    for flag, count in (("--partitions", partition_count), ("--pods", member_count)):
        if not 0 <= count <= FRESH_LIMIT:
            raise errors.InvalidInput(flag, f"must be from 0 to {FRESH_LIMIT:,}, got {count:,}")
    return models.Scenario(
        partitions=tuple(models.PartitionId(str(p)) for p in range(partition_count)),
        members=tuple(
            models.Member(name=models.MemberName(f"pod-{i}"), state="ready")
            for i in range(member_count)
        ),
    )


def dump_ownership(entry: models.Ownership) -> OwnershipBody:
    return {
        "owner": entry.owner,
        "epoch": entry.epoch,
        "state": entry.state,
        "since": _plain(entry.since),
    }


def dump_plan(plan: models.Plan) -> PlanBody:
    """A plan in the output format of `ehb plan --json`."""
    return {
        "assignment": {p: dump_ownership(e) for p, e in plan.assignment.items()},
        "moves": [
            {
                "partition": m.partition,
                "from": m.source,
                "to": m.target,
                "epoch": m.epoch,
                "kind": m.kind,
            }
            for m in plan.moves
        ],
        "balanced": plan.balanced,
        "targets": {str(n): t for n, t in plan.targets.items()},
    }


def dump_scenario(scenario: models.Scenario) -> ScenarioBody:
    """A scenario in the input format, with every key spelled out."""
    options = scenario.options
    return {
        "partitions": list(scenario.partitions),
        "members": [
            {
                "name": m.name,
                "state": m.state,
                "since": _plain(m.since),
                "weight": _plain(m.weight),
                "starting": m.starting,
                "outgoing": m.outgoing,
                "restarted": m.restarted,
            }
            for m in scenario.members
        ],
        "assignment": {p: dump_ownership(e) for p, e in scenario.assignment.items()},
        "released": {str(p): e for p, e in scenario.released.items()},
        "lag": {str(p): n for p, n in scenario.lag.items()},
        "idle": [str(p) for p in models.ordered_partitions(scenario.idle)],
        "now": _plain(scenario.now),
        "options": {
            "podGraceSeconds": _plain(options.pod_grace_seconds),
            "handoffTimeoutSeconds": _plain(options.handoff_timeout_seconds),
            "releaseWaitSeconds": _plain(options.release_wait_seconds),
            "maxMovesPerCycle": options.max_moves_per_cycle,
            "weighting": options.weighting,
            "lagTolerance": _plain(options.lag_tolerance),
        },
    }


def _plain(value: float) -> float:
    # 20 rather than 20.0, so that dumped scenarios read like the hand-written ones.
    return int(value) if float(value).is_integer() else value


def _object(raw: object, field: str, keys: tuple[str, ...] | None = None) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise errors.InvalidInput(field, f"expected an object, got {_describe(raw)}")
    if keys is not None:
        for key in raw:
            if key not in keys:
                prefix = "" if field == "scenario" else f"{field}."
                raise errors.InvalidInput(
                    f"{prefix}{key}", f"unknown key (expected one of {', '.join(keys)})"
                )
    return raw


def _list(raw: object, field: str) -> list[Any]:
    if not isinstance(raw, list):
        raise errors.InvalidInput(field, f"expected a list, got {_describe(raw)}")
    return raw


def _name(raw: object, field: str) -> str:
    if not isinstance(raw, str):
        raise errors.InvalidInput(field, f"expected a string, got {_describe(raw)}")
    if not raw:
        raise errors.InvalidInput(field, "must not be empty")
    return raw


def _number(raw: object, field: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise errors.InvalidInput(field, f"expected a number, got {_describe(raw)}")
    if not math.isfinite(raw):
        raise errors.InvalidInput(field, "must be a finite number")
    return float(raw)


def _seconds(raw: object, field: str) -> float:
    value = _number(raw, field)
    if value < 0:
        raise errors.InvalidInput(field, f"must not be negative, got {raw}")
    return value


def _count(raw: object, field: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise errors.InvalidInput(field, f"expected a whole number, got {_describe(raw)}")
    if raw < 0:
        raise errors.InvalidInput(field, f"must not be negative, got {raw}")
    return raw


def _choice(raw: object, field: str, allowed: tuple[_Choice, ...], what: str) -> _Choice:
    for value in allowed:
        if raw == value:
            return value
    expected = f"{', '.join(allowed[:-1])} or {allowed[-1]}"
    shown = repr(raw) if isinstance(raw, str) else _describe(raw)
    raise errors.InvalidInput(field, f"unknown {what} {shown} (expected {expected})")


def _member(raw: object, field: str) -> models.Member:
    body = _object(raw, field, _MEMBER_KEYS)
    if "name" not in body:
        raise errors.InvalidInput(f"{field}.name", "required")
    weight = _number(body.get("weight", 1), f"{field}.weight")
    if weight <= 0:
        raise errors.InvalidInput(f"{field}.weight", f"must be positive, got {body['weight']}")
    flags = {key: body.get(key, False) for key in _MEMBER_KEYS[4:]}
    for key, flag in flags.items():
        if not isinstance(flag, bool):
            raise errors.InvalidInput(
                f"{field}.{key}", f"expected true or false, got {_describe(flag)}"
            )
    return models.Member(
        name=models.MemberName(_name(body["name"], f"{field}.name")),
        state=_choice(body.get("state", "ready"), f"{field}.state", models.MEMBER_STATES, "state"),
        since=_number(body.get("since", 0), f"{field}.since"),
        weight=weight,
        starting=flags["starting"],
        outgoing=flags["outgoing"],
        restarted=flags["restarted"],
    )


def _ownership(raw: object, field: str) -> models.Ownership:
    body = _object(raw, field, _OWNERSHIP_KEYS)
    for key in ("owner", "epoch"):
        if key not in body:
            raise errors.InvalidInput(f"{field}.{key}", "required (owner may be null)")
    owner = body["owner"]
    state = _choice(body.get("state", "owned"), f"{field}.state", models.OWNERSHIP_STATES, "state")
    if owner is not None:
        owner = models.MemberName(_name(owner, f"{field}.owner"))
    elif state == "revoking":
        raise errors.InvalidInput(f"{field}.state", "an entry without owner cannot be revoking")
    return models.Ownership(
        owner=owner,
        epoch=_count(body["epoch"], f"{field}.epoch"),
        state=state,
        since=_number(body.get("since", 0), f"{field}.since"),
    )


def _options(raw: object) -> models.Options:
    body = _object(raw, "options", _OPTION_KEYS)
    defaults = models.Options()
    return models.Options(
        pod_grace_seconds=_seconds(
            body.get("podGraceSeconds", defaults.pod_grace_seconds), "options.podGraceSeconds"
        ),
        handoff_timeout_seconds=_seconds(
            body.get("handoffTimeoutSeconds", defaults.handoff_timeout_seconds),
            "options.handoffTimeoutSeconds",
        ),
        release_wait_seconds=_seconds(
            body.get("releaseWaitSeconds", defaults.release_wait_seconds),
            "options.releaseWaitSeconds",
        ),
        max_moves_per_cycle=_count(
            body.get("maxMovesPerCycle", defaults.max_moves_per_cycle), "options.maxMovesPerCycle"
        ),
        weighting=_choice(
            body.get("weighting", defaults.weighting),
            "options.weighting",
            models.WEIGHTINGS,
            "weighting",
        ),
        lag_tolerance=_tolerance(
            body.get("lagTolerance", defaults.lag_tolerance), "options.lagTolerance"
        ),
    )


def _tolerance(raw: object, field: str) -> float:
    value = _number(raw, field)
    if not 0 <= value <= models.MAX_LAG_TOLERANCE:
        raise errors.InvalidInput(
            field, f"must be between 0 and {_plain(models.MAX_LAG_TOLERANCE)}, got {raw}"
        )
    return value


def _describe(raw: object) -> str:
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, int | float):
        return f"the number {raw}"
    if isinstance(raw, str):
        return f"the string {raw!r}"
    kinds: dict[type, str] = {list: "a list", dict: "an object"}
    return kinds.get(type(raw), type(raw).__name__)
