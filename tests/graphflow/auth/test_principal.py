"""Principal: validated, frozen, hashable plain data that survives checkpoints.serde."""

from __future__ import annotations

import pytest

from checkpoints import serde
from graphflow.auth import Principal
from graphflow.auth.vocab import PRINCIPAL_TYPES
from graphflow.errors import InvalidArgumentError


def test_defaults_and_aaef_types() -> None:
    p = Principal("alice@co.com")
    assert (p.id, p.type, p.roles, p.scopes, p.attributes) == (
        "alice@co.com",
        "human_user",
        (),
        (),
        {},
    )
    assert PRINCIPAL_TYPES == (
        "human_user",
        "organization",
        "system",
        "upstream_agent",
        "service_account",
        "unknown",
    )
    for kind in PRINCIPAL_TYPES:
        assert Principal("x", type=kind).type == kind


@pytest.mark.parametrize("kind", ["human", "robot", "", None, "Human_User"])
def test_unknown_type_is_refused_naming_the_principal(kind: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"principal 'bob'.*type"):
        Principal("bob", type=kind)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", None, 5])
def test_id_must_be_a_non_empty_string(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="id"):
        Principal(bad)  # type: ignore[arg-type]


def test_roles_and_scopes_become_tuples_and_a_lone_string_is_one_role() -> None:
    p = Principal("a", roles=["admin", "analyst"], scopes=["refund.issue"])  # type: ignore[arg-type]
    assert p.roles == ("admin", "analyst") and p.scopes == ("refund.issue",)
    assert Principal("a", roles="admin").roles == ("admin",)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="roles"):
        Principal("a", roles=("admin", ""))
    with pytest.raises(InvalidArgumentError, match="roles"):
        Principal("a", roles=(1,))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="scopes must be a list of names, not dict"):
        Principal("a", scopes={"s": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="attributes"):
        Principal("a", attributes={1: "x"})  # type: ignore[dict-item]


def test_frozen_hashable_and_equal_by_value() -> None:
    a = Principal("a", roles=("admin",), attributes={"dept": ["x"]})
    b = Principal("a", roles=("admin",), attributes={"dept": ["x"]})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Principal("a", roles=("admin",), attributes={"dept": ["y"]})
    with pytest.raises(AttributeError):
        a.id = "b"  # type: ignore[misc]
    source = {"k": 1}
    c = Principal("c", attributes=source)
    source["k"] = 2
    assert c.attributes == {"k": 1}  # a copy: the caller's dict cannot change it


def test_coerce() -> None:
    p = Principal("a")
    assert Principal.coerce(p) is p
    assert Principal.coerce("bob") == Principal("bob")
    assert Principal.coerce(None) is None
    assert Principal.coerce({"id": "x", "roles": ["r"]}) == Principal("x", roles=("r",))
    with pytest.raises(InvalidArgumentError, match="Principal or an id"):
        Principal.coerce(42)  # type: ignore[arg-type]


def test_to_dict_from_dict_and_serde_round_trip() -> None:
    p = Principal("svc", type="service_account", roles=("ops",), scopes=("s",), attributes={"n": 1})
    data = p.to_dict()
    assert data == {
        "id": "svc",
        "type": "service_account",
        "roles": ["ops"],
        "scopes": ["s"],
        "attributes": {"n": 1},
    }
    assert Principal.from_dict(data) == p
    assert serde.loads(serde.dumps(p)) == p
    with pytest.raises(InvalidArgumentError, match="'id'"):
        Principal.from_dict({"roles": []})
    with pytest.raises(InvalidArgumentError, match="'id'"):
        Principal.from_dict({"id": "x", "role": "typo"})
