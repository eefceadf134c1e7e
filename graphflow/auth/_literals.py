"""Literals of policy conditions and the policy file's YAML: parsed without running code.

A literal is JSON, else a YAML 1.2 scalar or flow list, else the bare text; the YAML loader
builds plain data only (no tags that construct objects; duplicate keys refused).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Hashable, Mapping
from typing import Any

from graphflow.errors import InvalidArgumentError


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is a string, a number, a boolean or None."""
    return value is None or isinstance(value, str | int | float)


def parse_literal(raw: str, source: str) -> Any:
    """A literal's value: JSON, else YAML 1.2 scalar or flow list, else the bare text.

    Raises:
        InvalidArgumentError: not a scalar or a list of scalars.
    """
    try:
        value = json.loads(raw)
    except ValueError:
        try:
            value = load_yaml(raw)
        except InvalidArgumentError:
            items = _bare_list(raw, source)
            if items is not None:
                return items
            if raw[0] in "[{\"'":
                raise InvalidArgumentError(
                    f"condition {source!r}: literal {raw!r} is not valid JSON or YAML"
                ) from None
            value = raw
        if isinstance(value, Mapping) and raw[0] not in "[{\"'":
            value = raw  # bare text with a colon, such as "Content-Type: json"
    if is_scalar(value) or (isinstance(value, list) and all(is_scalar(v) for v in value)):
        return value
    raise InvalidArgumentError(
        f"condition {source!r}: literal {raw!r} must be a scalar or a list of scalars"
    )


def _bare_list(raw: str, source: str) -> list[Any] | None:
    """``[@corp.com, @evil.com]``: a flow list of bare words YAML refuses (a leading ``@``
    or backtick), read item by item; None when ``raw`` is not such a list."""
    if not (raw.startswith("[") and raw.endswith("]")) or any(c in raw[1:-1] for c in "[]{}\"'"):
        return None
    items = [item.strip() for item in raw[1:-1].split(",")]
    if not all(items):
        return None
    values = [parse_literal(item, source) for item in items]
    return values if all(is_scalar(v) for v in values) else None


@functools.cache
def _loader() -> type:
    """A safe YAML loader with YAML 1.2 core scalars that refuses duplicate keys."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(
            self, node: yaml.MappingNode, deep: bool = False
        ) -> dict[Hashable, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                except TypeError:  # an unhashable key: SafeLoader reports it
                    break
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    dropped = {
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
    }
    Loader.yaml_implicit_resolvers = {
        k: [(tag, rx) for tag, rx in v if tag not in dropped]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789")
    )
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?[0-9]+[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )

    return Loader


def load_yaml(text: str, source: str = "YAML") -> Any:
    """Parse YAML text safely (YAML 1.2 scalars, duplicate keys refused).

    Raises:
        InvalidArgumentError: the text is not valid YAML; names ``source`` and the line.
    """
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # a SafeLoader subclass: safe
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidArgumentError(f"{source}: invalid YAML{at}: {problem}") from None
