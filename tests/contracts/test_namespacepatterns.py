"""The namespaces named on ``ehb operator``'s command line: what kopf can serve is taken as
written, what no namespace could ever match is refused with a message saying what to give."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kopf._cogs.structs import references

from eventhub_balancer import errors
from eventhub_balancer.contracts import namespacepatterns

NAMES = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")


@pytest.mark.parametrize(
    "value",
    [
        "shop",
        "a",
        "team-a",
        "x" * 63,
        "team-*",
        "!kube-system",
        "team-?",
        "myapp-*, !*-pr-*, *pr-123",  # kopf's own example
        "team-*,!team-sandbox",
    ],
)
def test_names_and_kopf_patterns_are_served_as_written(value: str) -> None:
    assert namespacepatterns.served([value]) == (value,)


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("", r"'' has an empty part: give a namespace's name or a glob such as team-\*"),
        ("team-a,", "has an empty part"),
        ("team-a,,team-b", "has an empty part"),
        ("!", "has an empty part"),
        (" team-a", r"has spaces around it: give 'team-a'"),
        ("team-a\n", r"has spaces around it: give 'team-a'"),
        ("Team-A", r"'Team-A' is not a namespace's name: give one of 63 characters at most"),
        ("team_a", "is not a namespace's name"),
        ("team.a", "is not a namespace's name"),
        ("team a", "is not a namespace's name"),
        ("-team", "is not a namespace's name"),
        ("x" * 64, "is not a namespace's name"),
        ("Team-*", r"the glob 'Team-\*' can match no namespace"),
        ("team_*", "can match no namespace"),
        # kopf takes [ for no wildcard: it would watch the URL of a namespace 'team-[ab]'
        ("team-[ab]", "'team-\\[ab\\]' is not a namespace's name"),
        ("team-[ab]*", r"can match no namespace: use .*, and \* and \? as wildcards"),
        ("team-*, !Sandbox", r"'Sandbox' is not a namespace's name"),
    ],
)
def test_what_no_namespace_can_match_is_refused_naming_the_flag(value: str, complaint: str) -> None:
    with pytest.raises(errors.InvalidInput, match=complaint) as refused:
        namespacepatterns.served(["shop", value])
    assert refused.value.field == "--namespace"


@given(st.lists(NAMES, min_size=1, max_size=4))
def test_every_namespace_name_is_served_alone_or_listed_with_commas(names: list[str]) -> None:
    assert namespacepatterns.served(names) == tuple(names)
    assert namespacepatterns.served([", ".join(names)]) == (", ".join(names),)


@given(st.text(alphabet="aZ0-_.*?![], \t", max_size=20))
def test_what_is_served_as_a_plain_name_is_a_name_the_api_server_takes(value: str) -> None:
    """kopf watches a value without wildcards as a namespace's name in the URL: whatever it is
    handed that way was checked to be one."""
    try:
        namespacepatterns.served([value])
    except errors.InvalidInput:
        return
    for plain in references.select_specific_namespaces([value]):
        assert namespacepatterns.is_name(plain), plain
    # What the operator takes for a name (and watches without listing) is what kopf does.
    specific = bool(references.select_specific_namespaces([value]))
    assert namespacepatterns.is_pattern(value) is not specific


@pytest.mark.parametrize("value", ["shop", "team-*", "team-?", "team-[ab]"])
def test_one_name_or_glob_is_lent_the_identity(value: str) -> None:
    assert namespacepatterns.lent([value]) == (value,)


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("!kube-system", r"give one namespace or glob per flag, without '!' or ','"),
        ("shop,pay", "without '!' or ','"),
        ("", "has an empty part"),
        ("Shop", "is not a namespace's name"),
    ],
)
def test_a_loan_to_all_but_some_or_to_no_namespace_is_refused(value: str, complaint: str) -> None:
    with pytest.raises(errors.InvalidInput, match=complaint) as refused:
        namespacepatterns.lent([value])
    assert refused.value.field == "--identity-namespace"


def test_a_bound_namespace_is_one_name() -> None:
    assert namespacepatterns.name("shop", field="--bind-location") == "shop"
    with pytest.raises(errors.InvalidInput, match="--bind-location: 'team-\\*' is not a"):
        namespacepatterns.name("team-*", field="--bind-location")
