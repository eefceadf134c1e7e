"""Compiled graphs as nodes of other graphs, with durable, namespaced state.

A subgraph task runs a child ``Run`` in the namespace ``<parent ns>|<node>:<task id>`` of
the same thread, under the parent's lease and store. The child keeps its own checkpoints,
task records and pauses there, so a resumed parent task finds the child's progress and the
child's completed nodes never run again. Keys with the same name are shared; ``input`` and
``output`` map renamed keys. The parent task's update is what the child's nodes wrote to
shared keys, applied through the parent's reducers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from graphflow.engine.context import NodeContext
from graphflow.engine.loop import Run
from graphflow.engine.tasks import Writes
from graphflow.errors import GraphValidationError

if TYPE_CHECKING:
    from graphflow.compiled import CompiledGraph
    from graphflow.state import StateSchema


class SubgraphNode:
    """The node callable running a compiled graph inside a parent graph's task.

    Args:
        name: the node's name in the parent.
        graph: the compiled child graph (its own checkpointer, if any, is not used).
        parent_schema: the parent's state schema.
        input: child key -> parent key, for keys whose names differ (read by the child).
        output: child key -> parent key, for keys whose names differ (written back).
    """

    def __init__(
        self,
        name: str,
        graph: CompiledGraph,
        parent_schema: StateSchema,
        input: Mapping[str, str] | None = None,
        output: Mapping[str, str] | None = None,
    ):
        self.name = name
        self.graph = graph
        child = graph.schema.keys
        parent = parent_schema.keys
        for what, mapping in (("input", input or {}), ("output", output or {})):
            bad = [f"{c!r} (child)" for c in mapping if c not in child]
            bad += [f"{p!r} (parent)" for p in mapping.values() if p not in parent]
            if bad:
                raise GraphValidationError(
                    f"subgraph node {name!r}: {what}= maps missing keys {bad}", (name,)
                )
        shared = {k: k for k in child & parent}
        self.inputs = {**shared, **(input or {})}
        self.outputs = {**shared, **(output or {})}

    async def __call__(self, state: Any, ctx: NodeContext) -> Writes:
        """Run (or continue) the child graph; return its writes to the parent's keys."""
        run = ctx._run
        ns = child_namespace(run.ns, self.name, ctx.task_id)
        child = Run(
            self.graph,
            thread_id=run.thread_id,
            principal=run.principal,
            decisions=run.decisions,
            recursion_limit=run.recursion_limit,
            sink=run.sink,
            mode=run.mode,
            parent=run,
            ns=ns,
            path_prefix=f"{ctx.node}.",
            collect=self.outputs,
        )
        values = state if isinstance(state, Mapping) else _fields(state)
        inputs = {c: values[p] for c, p in self.inputs.items() if p in values}
        # A Send argument may carry child keys the parent does not have: they go in as given.
        child_keys = self.graph.schema.keys
        inputs.update((k, v) for k, v in values.items() if k in child_keys and k not in inputs)
        return Writes(await child.run_child(inputs))


def _fields(state: Any) -> dict[str, Any]:
    fields = getattr(type(state), "model_fields", None)
    if fields is None:
        return dict(vars(state))
    return {k: getattr(state, k) for k in fields}


def child_namespace(parent_ns: str, node: str, task_id: str) -> str:
    """The namespace of a subgraph task's run."""
    return f"{parent_ns}|{node}:{task_id}" if parent_ns else f"{node}:{task_id}"


def can_pause(graph: CompiledGraph) -> bool:
    """Whether a graph's nodes may pause: static gates, ``interrupt`` calls, confirmations."""
    return bool(pausing_nodes(graph))


def pausing_nodes(graph: CompiledGraph) -> list[str]:
    """The nodes of a graph that may pause, sorted.

    A node may pause when it is named in ``interrupt_before``/``interrupt_after``, when its
    code refers to ``interrupt`` (the function or ``ctx.interrupt``), when it is an agent
    node whose tools need confirmation, or when it is a subgraph that may pause.
    """
    gates = graph.interrupt_before | graph.interrupt_after
    return sorted(
        name for name, spec in graph.nodes.items() if name in gates or _may_pause(spec.fn)
    )


def _may_pause(fn: Any) -> bool:
    if isinstance(fn, SubgraphNode):
        return can_pause(fn.graph)
    agent = getattr(fn, "agent", None)
    if agent is not None and getattr(agent, "may_need_confirmation", False):
        return True
    target = getattr(fn, "__call__", fn) if not hasattr(fn, "__code__") else fn  # noqa: B004
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return code is not None and _mentions(code, "interrupt")


def _mentions(code: Any, name: str) -> bool:
    if name in code.co_names:
        return True
    return any(_mentions(c, name) for c in code.co_consts if hasattr(c, "co_names"))
