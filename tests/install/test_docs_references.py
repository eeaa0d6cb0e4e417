"""The manual against the charts and the code: what a page names must exist as it says.

An operator reads docs/ at 3 a.m. and types what it names. These checks hold every page of
docs/ (and the READMEs) to the sources those names come from, so that a value renamed in a
chart, a role narrowed in a template, an Event reason renamed or an alert retuned fails here
instead of misleading a reader:

- every chart value a page names (``networkPolicy.enabled``, ``--set image.tag=...``) exists
  in that chart's values.yaml, and a default the page gives is the one values.yaml holds;
- the RBAC tables of docs/install.md are the rules the chart's templates grant;
- every Event reason a page names is one the operator or the admin commands post, and the
  operator page lists every reason the event builders write literally;
- every alert in monitoring/prometheus/rules.yaml has its runbook in docs/operations.md, with
  the severity and the duration the rule has, and no runbook names an alert that is gone;
- every test a page names by node id (``tests/FOLDER/FILE.py::TEST``) is defined in that file.

Repository paths are checked by tests/install/test_docs.py; flags, metric names and
condition reasons by tests/install/test_docs_claims.py.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions as conditiontypes
from eventhub_balancer.reconciling import conflicts, reports, setasides
from tests.support import loading, paths

ROOT = paths.REPOSITORY
DOCS = ROOT / "docs"
PRODUCT = ROOT / "operator" / "eventhub_balancer"
CHARTS = {name: ROOT / "charts" / name for name in ("eventhub-balancer", "eventhub-consumer")}


def pages() -> list[Path]:
    return [
        *sorted(DOCS.glob("*.md")),
        ROOT / "README.md",
        *(chart / "README.md" for chart in CHARTS.values()),
    ]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@functools.cache
def chart_values(chart: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHARTS[chart] / "values.yaml").read_text())
    return loaded


# -- chart values -------------------------------------------------------------------------------

_MISSING = object()


def lookup(values: object, path: list[str]) -> object:
    """The value at ``path``; anything under a map whose default is empty (``labels: {}``,
    ``podLabels: {}``) is the user's own key and is taken as present."""
    node = values
    for key in path:
        if isinstance(node, dict) and not node:
            return None
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def split_key(key: str) -> list[str]:
    """A ``--set`` key split at the dots Helm splits it at (``\\.`` is a dot inside a key)."""
    return [part.replace("\0", ".") for part in key.replace("\\.", "\0").split(".")]


#: A value path in backticks, maybe with ``=value`` after it: ``serviceAccount.create=false``.
VALUE_SPAN = re.compile(r"`([A-Za-z]\w*(?:\.\w+)+)(?:=[^`]*)?`")


def named_values(text: str) -> Iterator[str]:
    """The dotted paths in backticks that name a chart value.

    A path names one when its first key is a top-level value of a chart, and, for the keys
    the operator chart does not have (the consumer chart's ``spark`` and ``consumer``), when
    its second key is one of that value's too: ``spark.driver.memory`` is a Spark setting,
    ``consumer.switchintervals`` a module.
    """
    operator_keys = set(chart_values("eventhub-balancer"))
    consumer = chart_values("eventhub-consumer")
    for match in VALUE_SPAN.finditer(text):
        path = match.group(1).split(".")
        in_consumer = isinstance(consumer.get(path[0]), dict) and path[1] in consumer[path[0]]
        if path[0] in operator_keys or in_consumer:
            yield match.group(1)


def test_the_value_scanner_tells_chart_values_from_spark_settings() -> None:
    text = (
        "`networkPolicy.enabled`, `serviceAccount.create=false`, `spark.enabled`, "
        "`spark.driver.memory`, `consumer.switchintervals.prompt_gil`, `spec.paused`"
    )
    assert list(named_values(text)) == [
        "networkPolicy.enabled",
        "serviceAccount.create",
        "spark.enabled",
    ]
    assert lookup({"a": {"labels": {}}}, ["a", "labels", "release"]) is None
    assert lookup({"a": {"b": 1}}, ["a", "c"]) is _MISSING
    assert split_key(r"podLabels.azure\.workload\.identity/use") == [
        "podLabels",
        "azure.workload.identity/use",
    ]


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_chart_value_a_page_names_exists(page: Path) -> None:
    missing = [
        path
        for path in named_values(page.read_text())
        if all(lookup(chart_values(c), path.split(".")) is _MISSING for c in CHARTS)
    ]
    assert missing == [], f"{page_id(page)} names chart values that no values.yaml has"


def helm_commands(text: str) -> Iterator[list[str]]:
    """The ``helm`` commands of a page's shell blocks, continuation lines joined."""
    for block in re.findall(r"```(?:sh|console|bash)\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.removeprefix("$ ")
            if line.split(" ", 1)[0].endswith("helm"):
                yield shlex.split(re.sub(r"\s#.*", "", line))


def set_keys(command: list[str]) -> Iterator[tuple[str, str]]:
    """(chart, key) of each ``--set`` and ``--set-string`` of a helm command."""
    chart = next((Path(w).name for w in command if w.startswith("charts/")), "")
    for flag, argument in itertools.pairwise(command):
        if flag in ("--set", "--set-string"):
            for assignment in argument.split(","):
                if "=" in assignment:
                    yield chart, assignment.split("=", 1)[0]


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_helm_set_names_a_value_of_its_chart(page: Path) -> None:
    wrong = []
    for command in helm_commands(page.read_text()):
        for chart, key in set_keys(command):
            if chart not in CHARTS:
                wrong.append(f"{key}: the command names no chart of charts/")
            elif lookup(chart_values(chart), split_key(key)) is _MISSING:
                wrong.append(f"{key}: not a value of charts/{chart}")
    assert wrong == []


def test_the_set_scanner_reads_a_documented_command() -> None:
    text = (
        "```sh\nhelm upgrade r charts/eventhub-balancer -n ns \\\n  --reset-then-reuse-values "
        "\\\n  --set-string 'podLabels.azure\\.workload\\.identity/use=true' \\\n"
        "  --set 'operatorIdentity.namespaces={shop}' --set a=1,b.c=2\n```\n"
    )
    assert [k for c in helm_commands(text) for k in set_keys(c)] == [
        ("eventhub-balancer", r"podLabels.azure\.workload\.identity/use"),
        ("eventhub-balancer", "operatorIdentity.namespaces"),
        ("eventhub-balancer", "a"),
        ("eventhub-balancer", "b.c"),
    ]


#: A row of docs/install.md's table of the most used values: names | defaults | what.
VALUES_ROW = re.compile(r"^\| (`[^|]+`) \| ([^|]+) \| [^|]+ \|$", re.MULTILINE)


def table_defaults(text: str) -> Iterator[tuple[str, str]]:
    """(value, default in backticks) of each row of the values table, paired in order: the
    row ``| `a.b`, `.c` | `true`, `1` | ...`` gives (a.b, true) and (a.c, 1)."""
    for row in VALUES_ROW.finditer(text):
        names = re.findall(r"`([^`]+)`", row.group(1))
        defaults = [d.strip() for d in re.sub(r"\([^)]*\)", "", row.group(2)).split(",")]
        parent = ""
        for name, default in zip(names, defaults, strict=False):
            if name.startswith("."):
                name = parent + name
            parent = name.rsplit(".", 1)[0] if "." in name else ""
            if default.startswith("`") and default.endswith("`"):
                yield name, default.strip("`")


def test_the_install_page_gives_the_defaults_of_values_yaml() -> None:
    found = dict(table_defaults((DOCS / "install.md").read_text()))
    assert len(found) >= 10, "the scanner no longer reads the values table"
    values = chart_values("eventhub-balancer")
    wrong = {
        name: (default, lookup(values, name.split(".")))
        for name, default in found.items()
        if lookup(values, name.split(".")) != yaml.safe_load(default)
    }
    assert wrong == {}


#: "(`networkPolicy.enabled`, on)", "`annotatePods` (`--annotate-pods`, off)",
#: "`admissionPolicy.enabled` (on; ...)": a switch and its default, in words.
SWITCHES = (
    re.compile(r"\(`(?P<value>[\w.]+)`, (?P<default>on|off)\b"),
    re.compile(r"`(?P<value>[\w.]+)` \(`--[\w-]+`, (?P<default>on|off)\)"),
    re.compile(r"`(?P<value>[\w.]+)` \((?P<default>on|off)[;)]"),
)


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_a_switch_said_on_or_off_is_so_in_values_yaml(page: Path) -> None:
    text = page.read_text()
    said = {(m["value"], m["default"] == "on") for p in SWITCHES for m in p.finditer(text)}
    wrong = [
        (value, on)
        for value, on in said
        if lookup(chart_values("eventhub-balancer"), value.split(".")) is not on
    ]
    assert wrong == []


# -- test node ids ------------------------------------------------------------------------------

#: ``tests/FOLDER/FILE.py::TEST`` (maybe ``::Class::test``), or ``::test_z`` after one in a line.
NODE_ID = re.compile(r"(tests/[\w/]+\.py)?::(\w+)")


def named_tests(text: str) -> Iterator[tuple[str, str]]:
    """(file, test) of each node id a page names; a bare ``::name`` is in the file named last
    on its line."""
    for line in text.splitlines():
        last = ""
        for match in NODE_ID.finditer(line):
            last = match.group(1) or last
            if last:
                yield last, match.group(2)


def defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def test_the_node_id_scanner_follows_a_line() -> None:
    text = "`tests/a/test_b.py::test_c`, `::test_d`\n`::test_e` `tests/x.py::K::test_f`"
    assert list(named_tests(text)) == [
        ("tests/a/test_b.py", "test_c"),
        ("tests/a/test_b.py", "test_d"),
        ("tests/x.py", "K"),
        ("tests/x.py", "test_f"),
    ]


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_test_a_page_names_exists(page: Path) -> None:
    missing = [
        f"{path}::{name}"
        for path, name in named_tests(page.read_text())
        if (ROOT / path).is_file() and name not in defined(ROOT / path)
    ]
    assert missing == []


# -- RBAC ---------------------------------------------------------------------------------------


def rbac_table(text: str, heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading``, cells stripped."""
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def words_in(cell: str) -> tuple[set[str], set[str]]:
    """The verbs of a cell, and those in parentheses (granted only with some value)."""
    optional = {w for group in re.findall(r"\(([^)]*)\)", cell) for w in re.findall(r"\w+", group)}
    plain = set(re.findall(r"\w+", re.sub(r"\([^)]*\)", "", cell)))
    return plain, optional


def granted(bodies: list[dict[str, Any]], *, kinds: tuple[str, ...]) -> dict[str, set[str]]:
    """resource -> verbs over the operator's roles of ``kinds`` (not the users' aggregated
    ones, nor the metrics reader's, which grants no resource)."""
    grants: dict[str, set[str]] = {}
    for body in bodies:
        labels = body["metadata"].get("labels") or {}
        if body["kind"] not in kinds or any(k.startswith(AGGREGATE_TO) for k in labels):
            continue
        for rule in body.get("rules") or []:
            for resource in rule.get("resources") or []:
                grants.setdefault(resource, set()).update(rule["verbs"])
    return grants


#: The labels by which Kubernetes' built-in view, edit and admin roles gather ClusterRoles.
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"


@functools.cache
def rendered(values_json: str = "{}") -> list[dict[str, Any]]:
    """The operator chart's objects with these values (JSON, so that the rendering is kept)."""
    from tests.support import charts

    manifests = charts.render(
        CHARTS["eventhub-balancer"],
        json.loads(values_json),
        name=loading.RELEASE,
        namespace=loading.RELEASE_NAMESPACE,
    )
    return charts.documents(manifests)


def tenant_role(bodies: list[dict[str, Any]]) -> set[str]:
    return {
        resource
        for body in bodies
        if body["kind"] == "ClusterRole" and body["metadata"]["name"].endswith("-tenant")
        for rule in body["rules"]
        for resource in rule["resources"]
    }


def test_the_install_pages_rbac_table_is_what_the_chart_grants() -> None:
    """docs/install.md, "What the operator may do": each row's verbs are the chart's, the
    ones in parentheses only with the value that adds them, and "tenant namespaces only"
    rows only in the tenant ClusterRole."""
    rows = rbac_table((DOCS / "install.md").read_text(), "## What the operator may do")
    default = rendered()
    wide = granted(rendered('{"annotatePods": true}'), kinds=("ClusterRole",))
    peering = granted(
        rendered('{"peering": {"enabled": true}}')
        + rendered('{"peering": {"enabled": true}, "watchNamespaces": ["shop"]}'),
        kinds=("ClusterRole", "Role"),
    )
    base = granted(default, kinds=("ClusterRole",))
    tenants = tenant_role(default)
    documented: set[str] = set()
    wrong = []
    for cells in rows:
        resources = re.findall(r"`([\w/]+)`", cells[0])
        plain, optional = words_in(cells[1])
        for resource in resources:
            documented.add(resource)
            source = peering if "peering" in resource else base
            if source.get(resource, set()) != plain:
                wrong.append(
                    f"{resource}: page {sorted(plain)}, chart {sorted(source.get(resource, set()))}"
                )
            if optional and wide.get(resource, set()) != plain | optional:
                wrong.append(
                    f"{resource}: with its option the chart grants {sorted(wide[resource])}"
                )
            if ("tenant namespaces only" in cells[2]) != (resource in tenants):
                wrong.append(f"{resource}: tenant-only is '{cells[2]}' on the page")
    every = set(base) | set(peering) | set(wide)
    assert wrong == []
    assert sorted(every - documented) == [], "rules the chart grants that the page does not list"


def test_the_install_pages_user_roles_are_the_charts() -> None:
    rows = rbac_table((DOCS / "install.md").read_text(), "## What your users may do")
    roles = {
        body["metadata"]["name"].rsplit("-", 1)[1]: body
        for body in rendered()
        if body["kind"] == "ClusterRole" and body["metadata"]["name"].endswith(("-view", "-edit"))
    }
    assert len(rows) == len(roles) == 2
    for cells in rows:
        role = roles[cells[0].strip("`").rsplit("-", 1)[1]]
        gathered = {
            k.rsplit("-", 1)[1]
            for k, v in role["metadata"]["labels"].items()
            if k.startswith(AGGREGATE_TO) and v == "true"
        }
        assert set(re.findall(r"\w+", cells[1])) == gathered, cells
        (rule,) = [r for r in role["rules"] if "eventhubconsumers" in r["resources"]]
        assert set(re.findall(r"\w+", cells[2])) == set(rule["verbs"]), cells


# -- Event reasons ------------------------------------------------------------------------------


def _reason_literals(path: Path) -> Iterator[str]:
    """The string constants a module gives as a reason: ``reason="X"``, ``reason = "X"``,
    ``REASON... = "X"``, ``reason: ClassVar[str] = "X"``, ``c.reason in ("X", ...)`` and the
    ``misconfigured=``/``unreachable=`` reasons of a dependency's fault."""
    tree = ast.parse(path.read_text())

    def constants(node: ast.AST) -> Iterator[str]:
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                yield n.value

    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("reason", "misconfigured", "unreachable"):
            yield from constants(node.value)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in targets]
            if node.value is not None and any(n.lower().startswith("reason") for n in names):
                yield from constants(node.value)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "reason"
        ):
            for comparator in node.comparators:
                yield from constants(comparator)


#: The modules that post Events, and those whose reasons a posted Event carries (a dependency's
#: fault, an invalid spec, a conflict).
EVENT_MODULES = (
    "reconciling/kubeevents.py",
    "reconciling/troubleevents.py",
    "reconciling/coordinates.py",
    "reconciling/conflicts.py",
    "reconciling/conditions.py",
    "reconciling/refusals.py",
    "reconciling/foreignreaders.py",
    "reconciling/lostblobs.py",
    "reconciling/rollbacks.py",
    "cli/checkpointresets.py",
    "cli/checkpointimports.py",
)


@functools.cache
def event_reasons() -> frozenset[str]:
    """Every reason an Event of the operator or of the admin commands may carry."""
    found = {r for module in EVENT_MODULES for r in _reason_literals(PRODUCT / module)}
    found |= set(reports.EVENT_REASONS.values()) | {setasides.REASON}
    found |= conditiontypes.CANNOT_PROCESS
    found |= {
        cls.reason
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.EventHubBalancerError)
    }
    return frozenset(r for r in found if re.fullmatch(r"[A-Z][A-Za-z]+", r))


PAREN = r"\([^()]*(?:\([^()]*\)[^()]*)*\)"
#: A list of reasons in backticks, each maybe with words in parentheses after it.
REASON_LIST = (
    r"(?:`[A-Z][A-Za-z]+`(?:\s*" + PAREN + r")?(?:,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+)?)+"
)
#: "Event `X`", "Events `X`, `Y`", "a Warning (`X`, ...)", "Events on the ...: `X`, ...".
EVENT_MENTION = re.compile(
    r"\b(?:Events?|Warning|Normal)(?=[\s:(])(?!\s+Hubs)(?:\s+Events?)?"
    r"(?:\s*(?:is\s+)?|[^.`|]{0,110}?:\s*|[^.`|(]{0,60}\(\s*)"
    r"(" + REASON_LIST + ")"
)


def named_events(text: str) -> list[str]:
    names = []
    for match in EVENT_MENTION.finditer(text):
        names += re.findall(r"`([A-Z][A-Za-z]+)`", re.sub(PAREN, "", match.group(1)))
    return names


def test_the_event_scanner_reads_lists_and_skips_conditions() -> None:
    text = (
        "one Warning Event `Conflict`; the Events `PartitionFailing`, `PartitionParked` "
        "(a note) and `PartitionLost`; one Warning Event of that reason, and `Ready` `False`; "
        "Event Hubs (`EventHubReachable`); Events/s per pod (`Ready`)."
    )
    assert named_events(text) == [
        "Conflict",
        "PartitionFailing",
        "PartitionParked",
        "PartitionLost",
    ]


def test_the_event_reasons_are_read_from_the_code() -> None:
    reasons = event_reasons()
    assert {
        "PartitionAssigned",
        "HandoffTimedOut",
        "CoordinatesChanged",
        "LocationShared",
    } <= reasons
    assert {"CheckpointsReset", "PartitionRecovered", "InvalidSpec", "SecretNotFound"} <= reasons


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_event_a_page_names_is_one_the_code_posts(page: Path) -> None:
    unknown = sorted(set(named_events(page.read_text())) - event_reasons())
    assert unknown == []


def test_the_operator_page_lists_every_event_the_builders_write() -> None:
    """The reasons kubeevents and coordinates write as they are, the partition troubles' and
    the refusals' are all in docs/operator.md's list of Events (those that repeat a
    dependency's fault are too many to list: the list ends with "...")."""
    literal = {
        r
        for module in ("reconciling/kubeevents.py", "reconciling/coordinates.py")
        for r in _reason_literals(PRODUCT / module)
        if re.fullmatch(r"[A-Z][A-Za-z]+", r)
    }
    literal |= set(reports.EVENT_REASONS.values()) | {setasides.REASON}
    literal |= {conflicts.REASON, conflicts.REASON_BOUND, conflicts.REASON_SHARED, "InvalidSpec"}
    listed = set(named_events((DOCS / "operator.md").read_text()))
    assert sorted(literal - listed) == []


# -- alerts -------------------------------------------------------------------------------------


def alert_rules() -> dict[str, dict[str, Any]]:
    loaded = yaml.safe_load((ROOT / "monitoring" / "prometheus" / "rules.yaml").read_text())
    return {r["alert"]: r for g in loaded["groups"] for r in g["rules"] if "alert" in r}


def runbooks() -> dict[str, str]:
    """Alert name -> its runbook's text, from docs/operations.md's ``### Name`` headings."""
    text = (DOCS / "operations.md").read_text()
    section = text.split("## Dashboards and alerts", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### (\w+)\n", section, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_alert_has_a_runbook_and_every_runbook_an_alert() -> None:
    assert sorted(runbooks()) == sorted(alert_rules())


def _minutes(duration: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([mh])", duration).groups()  # type: ignore[union-attr]
    return int(number) * (60 if unit == "h" else 1)


@pytest.mark.parametrize("alert", sorted(alert_rules()))
def test_a_runbook_gives_its_alerts_severity_and_duration(alert: str) -> None:
    rule = alert_rules()[alert]
    text = runbooks()[alert]
    severity = re.match(r"\s*\*(\w+)\.\*", text)
    assert severity is not None, f"{alert}: the runbook does not start with its severity"
    assert severity.group(1).lower() == rule["labels"]["severity"]
    lead = text.split("\n\n", 1)[0]
    said = [int(n) for n in re.findall(r"\b[Ff]or (\d+) minutes\b", lead)]
    if "for" in rule:
        assert said == [_minutes(rule["for"])], f"{alert}: the rule waits {rule['for']}"
    else:
        assert said == [], f"{alert}: the rule fires at once"


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_alert_a_page_names_exists(page: Path) -> None:
    named = set(re.findall(r"\b(EventHub[A-Za-z]+|EventHubBalancer[A-Za-z]+)\b", page.read_text()))
    alerts = set(alert_rules())
    # The alert names share the EventHub prefix with reasons and kinds: only a name that ends
    # the way an alert does is taken for one.
    looks_like_alert = {
        n
        for n in named
        if n not in event_reasons()
        and n.endswith(("Growing", "Owner", "Troubled", "Errors", "Stale", "NotReady", "TimedOut"))
    }
    assert sorted(looks_like_alert - alerts) == []
