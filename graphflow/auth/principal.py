"""Who a run acts for: the principal whose authority every tool call is checked against."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoints import serde
from graphflow.auth.vocab import PRINCIPAL_TYPES, PrincipalType, check_word
from graphflow.errors import InvalidArgumentError

__all__ = ["Principal"]


def names(value: Any, what: str, where: str) -> tuple[str, ...]:
    """A tuple of non-empty strings from a sequence of them (a lone string is one item).

    Raises:
        InvalidArgumentError: an item is not a non-empty string, naming ``where`` and
            ``what``.
    """
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, Iterable) or isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"{where}: {what} must be a list of names, not {type(value).__name__}"
        )
    out = tuple(value)
    for item in out:
        if not isinstance(item, str) or not item:
            raise InvalidArgumentError(f"{where}: {what} must be non-empty strings, not {item!r}")
    return out


@dataclass(frozen=True, slots=True)
class Principal:
    """The person, service or agent on whose behalf a run calls tools.

    It is plain data, stored with the thread and bound to it across pauses and resumes.

    Args:
        id: a stable identifier, such as an e-mail address or a service account name.
        type: an AAEF principal type (``human_user``, ``organization``, ``system``,
            ``upstream_agent``, ``service_account`` or ``unknown``).
        roles: role names; :class:`~graphflow.auth.AccessControl` adds the roles it assigns
            to ``id``. A lone string is one role.
        scopes: authority scopes (free-form names a policy may test).
        attributes: more facts a policy may test as ``principal.attributes.KEY``.

    Raises:
        InvalidArgumentError: an empty id, an unknown type, or roles or scopes that are not
            names.
    """

    id: str
    type: PrincipalType = "human_user"
    roles: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidArgumentError(
                f"a principal's id must be a non-empty string, not {self.id!r}"
            )
        where = f"principal {self.id!r}"
        check_word(self.type, PRINCIPAL_TYPES, "type", where)
        object.__setattr__(self, "roles", names(self.roles, "roles", where))
        object.__setattr__(self, "scopes", names(self.scopes, "scopes", where))
        if not isinstance(self.attributes, Mapping) or not all(
            isinstance(k, str) for k in self.attributes
        ):
            raise InvalidArgumentError(
                f"{where}: attributes must be a mapping with string keys, not {self.attributes!r}"
            )
        object.__setattr__(self, "attributes", dict(self.attributes))

    def __hash__(self) -> int:
        # Equal principals have equal ids, roles and scopes; attributes (a dict) stay out.
        return hash((self.id, self.type, self.roles, self.scopes))

    @classmethod
    def coerce(cls, value: Principal | str | Mapping[str, Any] | None) -> Principal | None:
        """A ``Principal`` from a Principal, an id string or a ``to_dict()`` mapping.

        ``None`` stays ``None`` (no principal).

        Raises:
            InvalidArgumentError: ``value`` is none of these.
        """
        if value is None or isinstance(value, Principal):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise InvalidArgumentError(
            f"a principal must be a Principal or an id string, not {type(value).__name__}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The principal as plain JSON-able data (lists for roles and scopes)."""
        return {
            "id": self.id,
            "type": self.type,
            "roles": list(self.roles),
            "scopes": list(self.scopes),
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Principal:
        """The principal ``to_dict()`` wrote.

        Raises:
            InvalidArgumentError: ``data`` has no ``id``, has unknown keys or bad values.
        """
        unknown = set(data) - {"id", "type", "roles", "scopes", "attributes"}
        if unknown or "id" not in data:
            raise InvalidArgumentError(
                f"a principal mapping needs 'id' and may have type, roles, scopes and "
                f"attributes; got keys {sorted(map(str, data))}"
            )
        return cls(
            data["id"],
            data.get("type", "human_user"),
            data.get("roles", ()),
            data.get("scopes", ()),
            data.get("attributes", {}),
        )


serde.register(Principal, name="graphflow.auth.Principal")
