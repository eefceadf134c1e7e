"""``import graphflow`` alone imports no engine; the first public name loads the whole API.
``import checkpoints`` alone imports none of its modules; each name loads its own.

A light submodule (``graphflow.cli`` for ``graphflow --help``) must not pay for the engine;
a user of ``graphflow.X`` gets exactly what an eager import gave.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_graphflow_loads_no_submodule() -> None:
    code = (
        "import sys, graphflow\n"
        "print(sorted(m for m in sys.modules if m.startswith(('graphflow.', 'checkpoints'))))"
    )
    assert _run(code) == "[]"


def test_a_public_name_loads_the_api_and_compile_works() -> None:
    code = (
        "import sys\n"
        "from typing import TypedDict\n"
        "from graphflow import StateGraph, START, END\n"
        "import graphflow\n"
        "class S(TypedDict):\n    x: int\n"
        "g = StateGraph(S).add_node('a', lambda s: {'x': 1}).add_edge(START, 'a')\n"
        "g = g.add_edge('a', END).compile()\n"
        "print(type(g).__name__, g.invoke({'x': 0}).state, 'graphflow.compiled' in sys.modules,\n"
        "      sorted(set(graphflow.__all__) - set(vars(graphflow))))"
    )
    assert _run(code) == "CompiledGraph {'x': 1} True []"


def test_send_is_storable_without_the_top_level_names() -> None:
    """``Send`` registers itself where it is defined: a process that reaches it through a
    submodule can store it."""
    code = (
        "from checkpoints import serde\n"
        "from graphflow.types import Send\n"
        "print(serde.loads(serde.dumps(Send('n', {'a': 1}))))"
    )
    assert _run(code) == "Send(node='n', arg={'a': 1})"


def test_unknown_names_and_dir() -> None:
    import graphflow

    assert "StateGraph" in dir(graphflow)
    with pytest.raises(AttributeError, match="no_such_name"):
        graphflow.no_such_name  # noqa: B018


def test_the_builder_alone_compiles() -> None:
    """A program that imports only ``graphflow.builder`` still compiles and runs a graph."""
    code = (
        "from typing import TypedDict\n"
        "from graphflow.builder import StateGraph\n"
        "class S(TypedDict):\n    x: int\n"
        "g = StateGraph(S).add_node('a', lambda s: {'x': 1}).add_edge('__start__', 'a')\n"
        "print(g.add_edge('a', '__end__').compile().invoke({'x': 0}).state)"
    )
    assert _run(code) == "{'x': 1}"


def test_importing_checkpoints_loads_no_submodule_and_a_name_only_its_own() -> None:
    """``checkpoints`` binds each public name from its module on first use: a process that
    opens a SQLite store pays for neither ``MemoryCheckpointer`` nor the unused rest."""
    code = (
        "import sys, checkpoints\n"
        "print(sorted(m for m in sys.modules if m.startswith('checkpoints.')))\n"
        "from checkpoints import CheckpointError\n"
        "print(sorted(m for m in sys.modules if m.startswith('checkpoints.')))\n"
        "from checkpoints import SqliteCheckpointer\n"
        "print('checkpoints.sqlite' in sys.modules, 'checkpoints.memory' in sys.modules)"
    )
    assert _run(code).splitlines() == ["[]", "['checkpoints.errors']", "True False"]


def test_checkpoints_names_star_import_serde_and_dir() -> None:
    code = (
        "import checkpoints\n"
        "print(checkpoints.serde.loads(checkpoints.serde.dumps(checkpoints.TaskSpec('t', 'n'))))\n"
        "ns = {}\n"
        "exec('from checkpoints import *', ns)\n"
        "print(sorted(n for n in ns if n != '__builtins__') == checkpoints.__all__,\n"
        "      set(checkpoints.__all__) <= set(dir(checkpoints)))"
    )
    assert _run(code).splitlines() == [
        "TaskSpec(id='t', node='n', has_arg=False, arg=None)",
        "True True",
    ]
    import checkpoints

    with pytest.raises(AttributeError, match="no_such_name"):
        checkpoints.no_such_name  # noqa: B018


def test_an_agent_graph_loads_no_http_client_until_a_request() -> None:
    """httpx (which imports rich and click) is the HTTP model's, loaded by its first
    request: a process running scripted or custom models never pays for it."""
    code = (
        "import sys\n"
        "from graphflow.agents import Agent, AgentNode, OpenAIChatModel, ScriptedModel\n"
        "m = OpenAIChatModel('http://127.0.0.1:9/v1', 'm')\n"
        "print([n for n in ('httpx', 'rich', 'ssl') if n in sys.modules])"
    )
    assert _run(code) == "[]"
