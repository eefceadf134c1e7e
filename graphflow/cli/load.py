"""Opening what a command works on: the store on ``--db``, the ``--graph``, and a graph that
reads any thread of a store without its code.

Commands that only read or answer threads (``show``, ``history``, ``pauses``, ``approve``,
``deny``, ``answer``, ``cancel``) need no ``--graph``: ``store_graph`` gives them a
``CompiledGraph`` on the store whose spec knows no node and no reducer. What that changes is
said where it is made (``_StoreSpec``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from graphflow.cli.common import CliError, Usage, sqlite_path

if TYPE_CHECKING:
    from checkpoints.sqlite import SqliteCheckpointer
    from graphflow.compiled import CompiledGraph
    from graphflow.spec import GraphSpec, NodeSpec
    from graphflow.state import Channel

T = TypeVar("T")


def store(path: str) -> SqliteCheckpointer:
    """The SQLite store on ``path`` (created when missing: callers that must not create
    it check first, ``common.existing_database``)."""
    sqlite_path(path)
    import click

    from checkpoints.sqlite import SqliteCheckpointer

    opened = SqliteCheckpointer(path)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # closed with the command (a process that runs several, a test)
        ctx.call_on_close(lambda: call(opened.close))
    return opened


def call(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run one async call of the SQLite store, its I/O inline (as the sync API does): for
    listings that need no ``CompiledGraph`` (and so no engine import).

    With inline I/O the store's calls never suspend, so the call runs to its end here,
    without an event loop, which would cost a new process some 40 ms of imports (asyncio
    and anyio's backend). A call that does suspend is a bug: it raises ``RuntimeError``.
    """
    import contextvars

    from checkpoints.blocking import inline_io

    async def run() -> T:
        inline_io.set(True)
        return await fn(*args)

    coroutine = run()
    try:
        contextvars.copy_context().run(coroutine.send, None)  # (inline_io is set in there)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError(
        f"{getattr(fn, '__qualname__', fn)!s} waited for an event loop: load.call runs only "
        "store calls that never suspend"
    )


def graph(ref: str) -> CompiledGraph:
    """The ``CompiledGraph`` that ``--graph MODULE:ATTRIBUTE`` names; ``MODULE`` is imported
    with the current directory first on ``sys.path``. A failure names the reference."""
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise Usage(f"--graph {ref!r} must be MODULE:ATTRIBUTE, such as myflows:graph")
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # (the commands it suggests name it: ``common.suggest``)
        ctx.meta["graphflow.graph_ref"] = ref
    cwd = os.getcwd()
    if not sys.path or sys.path[0] != cwd:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            raise CliError(
                f"--graph {ref!r}: no module named {module_name!r} in the current directory "
                f"({cwd}) or on the Python path"
            ) from None
        raise CliError(f"--graph {ref!r}: importing {module_name!r} failed: {e}") from None
    except Exception as e:  # the module's own code failed (a bad graph, a syntax error)
        raise CliError(
            f"--graph {ref!r}: importing {module_name!r} failed: {type(e).__name__}: {e}"
        ) from None
    except SystemExit as e:  # (its exit code would pass for one of ours: 3 is "tampered")
        raise CliError(
            f"--graph {ref!r}: importing {module_name!r} failed: it called sys.exit({e.code!r})"
            "; a module a command imports must not exit"
        ) from None
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CliError(
                f"--graph {ref!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    from graphflow.compiled import CompiledGraph

    if not isinstance(value, CompiledGraph):
        hint = "; call .compile() on it" if hasattr(value, "compile") else ""
        raise CliError(f"--graph {ref!r} is a {type(value).__name__}, not a CompiledGraph{hint}")
    return value


def on_store(compiled: CompiledGraph, path: str) -> CompiledGraph:
    """``compiled`` running on the SQLite store ``path`` instead of its own checkpointer."""
    from graphflow.compiled import CompiledGraph

    return CompiledGraph(compiled.spec, store(path))


def store_graph(path: str, ref: str | None = None) -> CompiledGraph:
    """A ``CompiledGraph`` on ``path`` to read and answer threads with: the ``--graph``
    when given, else one that reads any thread without the graph's code."""
    if ref is not None:
        return on_store(graph(ref), path)
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # an error reading a value then says --graph may help
        ctx.meta["graphflow.store_view"] = True
    # The packages whose types a thread may hold (messages, principals) register them for
    # the store to revive; a graph's own types need its --graph.
    import graphflow.agents
    import graphflow.auth  # noqa: F401
    from graphflow.compiled import CompiledGraph

    return CompiledGraph(_store_spec(), store(path))


_SPEC: list[GraphSpec] = []


def _store_spec() -> GraphSpec:
    """The spec of ``_StoreSpec`` (made once)."""
    if not _SPEC:
        _SPEC.append(_StoreSpec.make())
    return _SPEC[0]


class _StoreSpec:
    """A ``GraphSpec`` for reading stored threads without the graph's code.

    - Its state is a TypedDict of no declared key, so values are shown as stored (a dict,
      never checked against a schema), and every key counts as last-write-wins: the
      ``result`` of a task whose step was applied is each key's value after the step (with
      ``--graph``, what the node wrote, such as the items it appended).
    - Every node may be a subgraph: ``get_state(subgraphs=True)`` looks for each task's
      namespace in the store and reads what it finds with this same spec.
    - It has no name and the default lease TTL: ``cancel`` keeps the thread's graph name.
    """

    @staticmethod
    def make() -> GraphSpec:
        from typing import TypedDict

        from graphflow.spec import Edges, GraphSpec, NodeSpec
        from graphflow.state import Channel, StateSchema

        class StoredState(TypedDict):
            """The state of a thread read without its graph (keys as stored)."""

        class AnyKey(dict[str, Channel]):
            def get(self, key: str, default: Any = None) -> Channel:
                found = super().get(key)
                return found if found is not None else Channel(key, Any, None, None, False)

        class AnyNode(Mapping[str, NodeSpec]):
            def __init__(self) -> None:
                self.spec: GraphSpec | None = None

            def __getitem__(self, name: str) -> NodeSpec:
                return NodeSpec(name, None, False, False, subgraph=self.spec)

            def __iter__(self) -> Iterator[str]:
                return iter(())

            def __len__(self) -> int:
                return 0

        schema = StateSchema(StoredState)
        schema.channels = AnyKey()
        nodes = AnyNode()
        spec = GraphSpec(schema=schema, nodes=nodes, edges=Edges())
        nodes.spec = spec
        return spec
