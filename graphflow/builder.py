"""``StateGraph``: the builder users declare nodes and edges with.

``compile()`` validates what was declared (``graphflow.validate``) and freezes it into a
``GraphSpec`` (``graphflow.spec``), which is what the engine runs. The runnable
``CompiledGraph`` belongs to a layer above this one: it registers how a spec becomes one
(``register_compiler``), so that this module imports nothing above it.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from graphflow.arguments import CONTROL
from graphflow.errors import GraphValidationError
from graphflow.retry import RetryPolicy, policies
from graphflow.spec import Branch, Edges, GraphSpec, NodeSpec, pausing_nodes
from graphflow.state import StateSchema
from graphflow.types import END, START
from graphflow.validate import validate

if TYPE_CHECKING:  # (types only: compiled is a layer above)
    from checkpoints import Checkpointer
    from graphflow.compiled import CompiledGraph
    from graphflow.evidence import EvidenceLog

_COMPILER: list[Callable[..., Any]] = []


def register_compiler(make: Callable[..., Any]) -> None:
    """Set how ``compile()`` turns a ``GraphSpec`` and a checkpointer into a runnable graph
    (``graphflow.compiled`` does, as graphflow is imported)."""
    _COMPILER[:] = [make]


def spec_of(value: Any) -> GraphSpec | None:
    """The ``GraphSpec`` of a compiled graph given as a node (None for anything else)."""
    found = getattr(value, "spec", None)
    return found if isinstance(found, GraphSpec) else None


@dataclass(slots=True)
class _EdgeDraft:
    """The edges as they are declared (frozen into ``Edges`` at compile)."""

    static: dict[str, list[str]] = field(default_factory=dict)
    joins: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    branches: dict[str, list[Branch]] = field(default_factory=dict)

    def frozen(self) -> Edges:
        return Edges(
            MappingProxyType({k: tuple(v) for k, v in self.static.items()}),
            tuple(self.joins),
            MappingProxyType({k: tuple(v) for k, v in self.branches.items()}),
        )


def _takes_ctx(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is called as ``fn(state, ctx)``: two required positional parameters,
    or one named ``ctx``/``context``."""
    if type(fn) is types.FunctionType and "__wrapped__" not in fn.__dict__:
        # A plain function: read its code object (inspect.signature is much slower, and a
        # process that resumes a thread compiles its graph first: benchmark W4).
        code = fn.__code__
        n = code.co_argcount
        if n - len(fn.__defaults__ or ()) >= 2:
            return True
        flags = code.co_flags
        count = n + code.co_kwonlyargcount + bool(flags & 0x04) + bool(flags & 0x08)
        return any(name in ("ctx", "context") for name in code.co_varnames[:count])
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(params) >= 2:
        return True
    return any(p.name in ("ctx", "context") for p in sig.parameters.values())


def _callable_with(fn: Callable[..., Any], n: int) -> bool:
    """Whether ``fn`` can be called with ``n`` positional arguments (True when unknown)."""
    if type(fn) is types.FunctionType and "__wrapped__" not in fn.__dict__:
        code = fn.__code__  # (cheaper than inspect.signature, as in _takes_ctx)
        pos = code.co_argcount
        kwonly = code.co_varnames[pos : pos + code.co_kwonlyargcount]
        return (
            pos - len(fn.__defaults__ or ()) <= n
            and (pos >= n or bool(code.co_flags & 0x04))
            and all(k in (fn.__kwdefaults__ or {}) for k in kwonly)
        )
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins): trusted
        return True
    return True


def _signature(fn: Callable[..., Any]) -> str:
    try:
        return f"{getattr(fn, '__qualname__', fn)!r} takes {inspect.signature(fn)}"
    except (TypeError, ValueError):  # pragma: no cover - such a callable is trusted
        return repr(fn)


def _check_call(name: str, fn: Callable[..., Any], takes_ctx: bool) -> None:
    """Refuse a node that cannot be called as ``fn(state)`` (or ``fn(state, ctx)`` when it
    takes a context): the mistake would otherwise show only when the node first runs."""
    if not _callable_with(fn, 2 if takes_ctx else 1):
        called = "fn(state, ctx)" if takes_ctx else "fn(state)"
        raise GraphValidationError(
            f"node {name!r}: {_signature(fn)}, so it cannot be called as {called}; a node "
            "takes the state and, optionally, a NodeContext as its second parameter: "
            "def node(state) or def node(state, ctx)",
            (name,),
        )


def _is_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004
    return call is not None and inspect.iscoroutinefunction(call)


class StateGraph:
    """Declare a graph of nodes over a typed state; ``compile()`` makes it runnable.

    Every method returns the builder, so calls chain.
    """

    def __init__(
        self,
        state_schema: type[Any],
        *,
        input_schema: Any = None,
        output_schema: Any = None,
        context_schema: Any = None,
        config_schema: Any = None,
    ):
        """LangGraph's ``input_schema``, ``output_schema``, ``context_schema`` and
        ``config_schema`` are refused: a graph takes and returns its one state schema."""
        options = {"input_schema": input_schema, "output_schema": output_schema}
        options |= {"context_schema": context_schema, "config_schema": config_schema}
        given = [n for n, v in options.items() if v is not None]
        if given:
            raise GraphValidationError(
                f"StateGraph({', '.join(f'{n}=...' for n in given)}) is not supported: a "
                "graph takes and returns its one state schema; declare every key there"
            )
        self.schema = StateSchema(state_schema)
        self.nodes: dict[str, NodeSpec] = {}
        self.edges = _EdgeDraft()
        self._errors: list[tuple[str, tuple[str, ...]]] = []
        # Names refused by add_node (already reported): edges to them are not reported again.
        self._rejected: set[str] = set()

    # -- nodes ----------------------------------------------------------------------------
    def add_node(
        self,
        name: str | Callable[..., Any] | Any,
        fn: Callable[..., Any] | Any = None,
        *,
        destinations: Sequence[str] | None = None,
        retry: RetryPolicy | Sequence[RetryPolicy] | None = None,
        input: Mapping[str, str] | None = None,
        output: Mapping[str, str] | None = None,
    ) -> StateGraph:
        """Add a node: ``add_node("name", fn)``, ``add_node(fn)`` or ``add_node(agent_node)``.

        ``fn`` is called as ``fn(state)`` or ``fn(state, ctx)``; it may be async. A compiled
        graph may be given as ``fn`` to nest it as a subgraph: keys with the same name are
        shared, and ``input``/``output`` map child keys to parent keys of other names.
        """
        if fn is None:
            fn = name
            name = getattr(fn, "name", None) or getattr(fn, "__name__", None)
            if not isinstance(name, str):
                raise GraphValidationError(
                    f"cannot infer a node name from {fn!r}; use add_node('name', fn)"
                )
        if not isinstance(name, str):
            raise GraphValidationError(f"node name must be a string, not {name!r}")
        if name in self.nodes:
            self._errors.append((f"duplicate node name {name!r}", (name,)))
            return self
        if CONTROL.search(name):
            self._errors.append((f"node name {name!r} holds a control character (a line "
                                 "break, an escape, a bidi override): name it in plain text",
                                 (name,)))  # fmt: skip
            self._rejected.add(name)
            return self
        if name in (START, END) or "." in name or ":" in name or not name:
            self._errors.append(
                (
                    f"reserved node name {name!r}: START, END, the empty name and names "
                    "containing '.' or ':' are reserved",
                    (name,),
                )
            )
            self._rejected.add(name)
            return self
        subgraph = spec_of(fn)
        if subgraph is not None:
            try:
                inputs, outputs = _subgraph_keys(name, subgraph, self.schema, input, output)
            except GraphValidationError as e:
                self._errors.append((str(e), e.nodes))
                self._rejected.add(name)
                return self
            self.nodes[name] = NodeSpec(
                name=name,
                fn=None,
                takes_ctx=True,
                is_async=True,
                destinations=tuple(destinations) if destinations is not None else None,
                retry=policies(retry, node=name),
                subgraph=subgraph,
                inputs=inputs,
                outputs=outputs,
            )
            return self
        elif input is not None or output is not None:
            raise GraphValidationError(
                f"node {name!r}: input=/output= mappings are only for subgraph nodes", (name,)
            )
        call: Any = fn
        if type(fn) is not types.FunctionType:  # (a plain function is its own callable)
            target = getattr(fn, "node_callable", None)
            if callable(target):
                call = target()
        if not callable(call):
            raise GraphValidationError(f"node {name!r}: {fn!r} is not callable", (name,))
        takes_ctx = _takes_ctx(call)
        _check_call(name, call, takes_ctx)
        self.nodes[name] = NodeSpec(
            name=name,
            fn=call,
            takes_ctx=takes_ctx,
            is_async=_is_async(call),
            destinations=tuple(destinations) if destinations is not None else None,
            retry=policies(retry, node=name),
        )
        return self

    # -- edges ----------------------------------------------------------------------------
    def add_edge(self, source: str | Sequence[str], target: str) -> StateGraph:
        """Add an edge; a list of sources makes a join that waits for all of them."""
        if isinstance(source, str):
            self.edges.static.setdefault(source, []).append(target)
        else:
            sources = tuple(source)
            if len(sources) == 1:
                return self.add_edge(sources[0], target)
            self.edges.joins.append((sources, target))
        return self

    def add_conditional_edges(
        self,
        source: str,
        router: Callable[..., Any],
        path_map: dict[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph:
        """Route from ``source`` by ``router(state)``: a name, names, ``Send``s or ``END``.

        ``path_map`` maps router results to nodes (a dict), or lists the possible targets.
        """
        if not callable(router) or not _callable_with(router, 1):
            what = _signature(router) if callable(router) else f"{router!r} is not callable"
            raise GraphValidationError(
                f"conditional edge from {source!r}: {what}; a router is called as "
                "router(state) and returns where to go",
                (source,),
            )
        pm: dict[Hashable, str] | None = None
        targets: tuple[str, ...] | None = None
        if isinstance(path_map, dict):
            pm = dict(path_map)
            targets = tuple(dict.fromkeys(pm.values()))
        elif path_map is not None:
            targets = tuple(path_map)
        self.edges.branches.setdefault(source, []).append(
            Branch(source, router, pm, targets, _is_async(router))
        )
        return self

    def set_entry_point(self, node: str) -> StateGraph:
        """Same as ``add_edge(START, node)``."""
        return self.add_edge(START, node)

    def set_finish_point(self, node: str) -> StateGraph:
        """Same as ``add_edge(node, END)``."""
        return self.add_edge(node, END)

    # -- compile --------------------------------------------------------------------------
    def spec(
        self,
        interrupt_before: Sequence[str] | str = (),
        interrupt_after: Sequence[str] | str = (),
        name: str | None = None,
        *,
        lease_ttl: float = 30.0,
        defer_retry: float = 30.0,
    ) -> GraphSpec:
        """Validate the graph (``GraphValidationError``) and freeze it into a ``GraphSpec``."""
        edges = self.edges.frozen()
        before, after = self._gates(interrupt_before), self._gates(interrupt_after)
        validate(self.nodes, edges, before, after, self._errors, self._rejected)
        nodes = MappingProxyType(dict(self.nodes))
        return GraphSpec(
            schema=self.schema,
            nodes=nodes,
            edges=edges,
            interrupt_before=before,
            interrupt_after=after,
            name=name,
            lease_ttl=lease_ttl,
            defer_retry=defer_retry,
            pausing=pausing_nodes(nodes, before, after),
        )

    def _gates(self, names: Sequence[str] | str) -> frozenset[str]:
        """``interrupt_before``/``interrupt_after`` as node names: ``"*"`` is every node (as
        in LangGraph), one string one node, else the names given."""
        if names == "*":
            return frozenset(self.nodes)
        return frozenset((names,) if isinstance(names, str) else names)

    def compile(
        self,
        checkpointer: Checkpointer | None = None,
        interrupt_before: Sequence[str] | str = (),
        interrupt_after: Sequence[str] | str = (),
        name: str | None = None,
        *,
        lease_ttl: float = 30.0,
        defer_retry: float = 30.0,
        evidence: EvidenceLog | bool | None = None,
    ) -> CompiledGraph:
        """Validate the graph (``GraphValidationError``) and return a runnable
        ``CompiledGraph`` on ``checkpointer``. ``evidence``: the evidence log of its tool
        calls and pauses (an ``EvidenceLog``; None: the default one beside the store;
        False: none, and then high-risk tool calls do not run; see ``graphflow.audit``).
        ``lease_ttl``: seconds a run's lease lasts after its last renewal; ``defer_retry``:
        seconds after which a thread paused on a deferred call is due for a worker to
        evaluate it again (``graphflow.worker``)."""
        if not _COMPILER:
            # Only the builder was imported so far (the package root binds its names on
            # first use): load the layer above, which registers how a spec is compiled.
            importlib.import_module("graphflow.compiled")

        graph: CompiledGraph = _COMPILER[0](
            self.spec(
                interrupt_before,
                interrupt_after,
                name,
                lease_ttl=lease_ttl,
                defer_retry=defer_retry,
            ),
            checkpointer,
            evidence=evidence,
        )
        return graph


def _subgraph_keys(
    name: str,
    child: GraphSpec,
    parent: StateSchema,
    input: Mapping[str, str] | None,
    output: Mapping[str, str] | None,
) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """The child -> parent key mappings of a subgraph node: keys with the same name are
    shared, ``input``/``output`` map the others."""
    for what, mapping in (("input", input or {}), ("output", output or {})):
        bad = [f"{c!r} (child)" for c in mapping if c not in child.schema.keys]
        bad += [f"{p!r} (parent)" for p in mapping.values() if p not in parent.keys]
        if bad:
            raise GraphValidationError(
                f"subgraph node {name!r}: {what}= maps missing keys {bad}", (name,)
            )
    shared = {k: k for k in child.schema.keys & parent.keys}
    return (
        MappingProxyType({**shared, **(input or {})}),
        MappingProxyType({**shared, **(output or {})}),
    )
