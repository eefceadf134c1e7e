"""AccessControl: deny wins, no allow means deny, unknown principals and roles."""

from __future__ import annotations

import pytest

from graphflow.agents import tool
from graphflow.auth import AccessControl, AccessResult, Principal, Role
from graphflow.errors import InvalidArgumentError


@pytest.fixture
def ac() -> AccessControl:
    return AccessControl(
        roles=[
            Role("analyst", allow=["search", "read_*"], deny=["delete_file"]),
            Role("admin", allow=["*"]),
            Role("auditor", allow=["read_inbox"], deny=["read_*"]),
        ],
        assignments={"alice@co.com": ["admin"], "bob@co.com": ["analyst"]},
    )


def test_an_allowing_role_allows(ac: AccessControl) -> None:
    result = ac.check("bob@co.com", "search")
    assert result == AccessResult(
        True, "role 'analyst' allows tool 'search'", ("analyst",), "analyst"
    )
    assert ac.check("bob@co.com", "read_inbox").allowed  # a glob
    assert ac.check("alice@co.com", "anything_at_all").allowed  # "*"


def test_no_allow_means_deny_and_says_so(ac: AccessControl) -> None:
    result = ac.check("bob@co.com", "issue_refund")
    assert not result.allowed
    assert result.reason == "no role of principal 'bob@co.com' (analyst) allows tool 'issue_refund'"
    assert result.roles == ("analyst",) and result.role is None


def test_a_deny_in_any_role_wins_over_an_allow_in_another(ac: AccessControl) -> None:
    both = Principal("alice@co.com", roles=("analyst",))  # admin (assigned) + analyst (own)
    result = ac.check(both, "delete_file")
    assert not result.allowed
    assert result.reason == "role 'analyst' denies tool 'delete_file'"
    assert result.role == "analyst" and result.roles == ("admin", "analyst")
    # Within one role too: the auditor's deny of read_* beats its allow of read_inbox.
    assert not ac.check(Principal("eve", roles=("auditor",)), "read_inbox").allowed


def test_deny_wins_whatever_the_role_order() -> None:
    ac = AccessControl(
        [Role("open", allow=["*"]), Role("closed", deny=["*"])],
        {"p": ["open", "closed"], "q": ["closed", "open"]},
    )
    assert not ac.check("p", "x").allowed and not ac.check("q", "x").allowed


def test_an_unknown_principal_is_denied(ac: AccessControl) -> None:
    result = ac.check("mallory@evil.com", "search")
    assert not result.allowed and result.roles == ()
    assert "'mallory@evil.com' has no role" in result.reason
    no_one = ac.check(None, "search")
    assert not no_one.allowed and "no principal" in no_one.reason


def test_roles_on_the_principal_count_and_unknown_ones_grant_nothing(ac: AccessControl) -> None:
    assert ac.check(Principal("carol", roles=("analyst",)), "search").allowed
    result = ac.check(Principal("dave", roles=("superuser",)), "search")
    assert not result.allowed and "unknown roles ignored: superuser" in result.reason
    assert ac.roles_of(Principal("bob@co.com", roles=("admin", "analyst"))) == (
        "analyst",
        "admin",
    )


def test_assigning_an_unknown_role_is_refused_at_construction_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match=r"'bob'.*unknown role 'analyts'"):
        AccessControl([Role("analyst")], {"bob": ["analyts"]})


def test_other_construction_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="role 'a' is defined twice"):
        AccessControl([Role("a"), Role("a")])
    with pytest.raises(InvalidArgumentError, match="Role objects"):
        AccessControl(["admin"])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="name"):
        Role("")
    with pytest.raises(InvalidArgumentError, match="role 'r': allow"):
        Role("r", allow=[""])


def test_check_takes_a_tool_object(ac: AccessControl) -> None:
    @tool(risk="low")
    def search(query: str) -> str:
        """Search."""
        return query

    assert ac.check("bob@co.com", search).allowed


def test_glob_patterns_are_case_sensitive_and_anchored() -> None:
    ac = AccessControl([Role("r", allow=["read_?", "db_[ab]*"])], {"p": ["r"]})
    assert ac.check("p", "read_x").allowed
    assert not ac.check("p", "read_xy").allowed
    assert not ac.check("p", "READ_x").allowed
    assert ac.check("p", "db_beta").allowed and not ac.check("p", "db_c").allowed
    assert not ac.check("p", "xread_x").allowed
