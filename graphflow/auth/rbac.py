"""Role-based access control: the first stage of a tool call's authorization.

A principal may call a tool when one of its roles allows the tool and none denies it.
Patterns are tool names or ``fnmatch`` globs (``"*"``, ``"read_*"``), matched
case-sensitively. The check is a pure function of its inputs: no I/O, no state.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from graphflow.auth.principal import Principal, names
from graphflow.errors import InvalidArgumentError

if TYPE_CHECKING:
    from graphflow.agents.tools import Tool

__all__ = ["AccessControl", "AccessResult", "Role"]


class _Patterns:
    """Tool-name patterns compiled once: a set of exact names and one regex of the globs."""

    __slots__ = ("exact", "globs")

    def __init__(self, patterns: Sequence[str]):
        self.exact = frozenset(p for p in patterns if not _is_glob(p))
        globs = [fnmatch.translate(p) for p in patterns if _is_glob(p)]
        self.globs = re.compile("|".join(f"(?:{g})" for g in globs)) if globs else None

    def match(self, name: str) -> bool:
        return name in self.exact or (self.globs is not None and self.globs.match(name) is not None)


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


@dataclass(frozen=True)
class Role:
    """A named set of tools its holders may (``allow``) and may not (``deny``) call.

    Args:
        name: the role name principals are assigned.
        allow: tool names or globs this role allows.
        deny: tool names or globs this role denies; a deny in any role of a principal wins
            over every allow.

    Raises:
        InvalidArgumentError: an empty name, or patterns that are not non-empty strings.
    """

    name: str
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    _allow: _Patterns = field(init=False, repr=False, compare=False)
    _deny: _Patterns = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError(
                f"a role's name must be a non-empty string, not {self.name!r}"
            )
        where = f"role {self.name!r}"
        object.__setattr__(self, "allow", names(self.allow, "allow", where))
        object.__setattr__(self, "deny", names(self.deny, "deny", where))
        object.__setattr__(self, "_allow", _Patterns(self.allow))
        object.__setattr__(self, "_deny", _Patterns(self.deny))

    def allows(self, tool: str) -> bool:
        """Whether one of ``allow`` matches ``tool``."""
        return self._allow.match(tool)

    def denies(self, tool: str) -> bool:
        """Whether one of ``deny`` matches ``tool``."""
        return self._deny.match(tool)


@dataclass(frozen=True, slots=True)
class AccessResult:
    """The answer of :meth:`AccessControl.check`.

    Attributes:
        allowed: whether the principal may call the tool.
        reason: why, naming the role that allowed or denied it (or that none allows it).
        roles: the principal's known roles that were considered, in order.
        role: the role that decided (the denying one, or the first allowing one), if any.
    """

    allowed: bool
    reason: str
    roles: tuple[str, ...] = ()
    role: str | None = None


class AccessControl:
    """Which principals may call which tools, by role.

    A principal's roles are those ``assignments`` give its id, then those on the
    ``Principal`` itself (role names this access control does not define grant nothing).
    A deny in any of them wins; with no allow the call is denied; a principal with no
    known role (or no principal) is denied.

    Args:
        roles: the roles, each with a distinct name.
        assignments: principal id -> the names of its roles.

    Raises:
        InvalidArgumentError: two roles share a name, or an assignment names an unknown
            role (the message names the role and the principal).
    """

    def __init__(
        self,
        roles: Iterable[Role],
        assignments: Mapping[str, Sequence[str]] | None = None,
    ):
        self.roles: dict[str, Role] = {}
        for role in roles:
            if not isinstance(role, Role):
                raise InvalidArgumentError(
                    f"access control roles must be Role objects, not {type(role).__name__}"
                )
            if role.name in self.roles:
                raise InvalidArgumentError(f"role {role.name!r} is defined twice")
            self.roles[role.name] = role
        self.assignments: dict[str, tuple[str, ...]] = {}
        for principal_id, assigned in (assignments or {}).items():
            if not isinstance(principal_id, str) or not principal_id:
                raise InvalidArgumentError(
                    f"assignments are keyed by principal id strings, not {principal_id!r}"
                )
            where = f"assignment of principal {principal_id!r}"
            assigned = names(assigned, "roles", where)
            for name in assigned:
                if name not in self.roles:
                    known = ", ".join(sorted(self.roles)) or "none"
                    raise InvalidArgumentError(
                        f"{where}: unknown role {name!r} (defined roles: {known}); define "
                        "it in roles= or fix the name"
                    )
            self.assignments[principal_id] = assigned

    def roles_of(self, principal: Principal | str | None) -> tuple[str, ...]:
        """The known roles of ``principal``: its assignments, then its own, without repeats."""
        p = Principal.coerce(principal)
        if p is None:
            return ()
        seen = dict.fromkeys(self.assignments.get(p.id, ()))
        seen.update(dict.fromkeys(r for r in p.roles if r in self.roles))
        return tuple(seen)

    def check(self, principal: Principal | str | None, tool: Tool | str) -> AccessResult:
        """Whether ``principal`` may call ``tool`` (a ``Tool`` or a tool name)."""
        name = tool if isinstance(tool, str) else tool.name
        p = Principal.coerce(principal)
        if p is None:
            return AccessResult(False, f"no principal: access to tool {name!r} is denied")
        roles = self.roles_of(p)
        if not roles:
            unknown = [r for r in p.roles if r not in self.roles]
            extra = f" (unknown roles ignored: {', '.join(unknown)})" if unknown else ""
            return AccessResult(
                False,
                f"principal {p.id!r} has no role in access control{extra}: access to tool "
                f"{name!r} is denied",
            )
        allowing: str | None = None
        for role_name in roles:
            role = self.roles[role_name]
            if role.denies(name):
                return AccessResult(
                    False, f"role {role_name!r} denies tool {name!r}", roles, role_name
                )
            if allowing is None and role.allows(name):
                allowing = role_name
        if allowing is None:
            return AccessResult(
                False,
                f"no role of principal {p.id!r} ({', '.join(roles)}) allows tool {name!r}",
                roles,
            )
        return AccessResult(True, f"role {allowing!r} allows tool {name!r}", roles, allowing)

    def __repr__(self) -> str:
        return f"AccessControl(roles={list(self.roles)!r}, assignments={self.assignments!r})"
