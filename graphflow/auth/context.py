"""What a tool callback is told about the call it is asked to judge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphflow.auth.principal import Principal
from graphflow.auth.vocab import Category, Risk

if TYPE_CHECKING:
    from graphflow.agents.tools import Tool

__all__ = ["ToolCallContext"]


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """One proposed tool call, as ``before_tool`` and ``after_tool`` callbacks see it.

    Attributes:
        principal: who the run acts for, or None.
        thread_id: the thread of the run.
        node: the graph node running the agent.
        agent: the agent's name.
        tool: the ``Tool`` proposed.
        args: the proposed arguments.
        call_id: the model's function call id.
        risk: the tool's effective risk (``high`` when it declares none).
        category: the tool's AAEF high-impact category, or None.
        tainted: whether the transcript holds untrusted content.
        taint_sources: where that content came from, in order of arrival.
    """

    principal: Principal | None
    thread_id: str
    node: str
    agent: str
    tool: Tool
    args: Mapping[str, Any]
    call_id: str
    risk: Risk
    category: Category | None = None
    tainted: bool = False
    taint_sources: tuple[str, ...] = ()

    @property
    def principal_id(self) -> str | None:
        """The principal's id, or None."""
        return None if self.principal is None else self.principal.id

    @classmethod
    def of(
        cls,
        tool: Tool,
        args: Mapping[str, Any],
        *,
        call_id: str,
        thread_id: str,
        node: str,
        agent: str,
        principal: Principal | str | None = None,
        tainted: bool = False,
        taint_sources: tuple[str, ...] = (),
    ) -> ToolCallContext:
        """The context of a call of ``tool``: its risk and category come from the tool."""
        return cls(
            Principal.coerce(principal),
            thread_id,
            node,
            agent,
            tool,
            args,
            call_id,
            tool.effective_risk,
            tool.category,
            tainted,
            tuple(taint_sources),
        )
