"""Subgraph nodes: a compiled graph run inside a parent's task (``Run.run_subgraph``).

A subgraph task runs a child run in the namespace ``<parent ns>|<node>:<task id>`` of the
same thread, under the parent's lease and store. The child keeps its own checkpoints, task
records and pauses there, so a resumed parent task finds the child's progress and the
child's completed nodes never run again. Keys with the same name are shared; the node's
``inputs``/``outputs`` map renamed keys. The parent task's update is what the child's nodes
wrote to shared keys, applied through the parent's reducers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphflow.spec import NodeSpec


def child_inputs(node: NodeSpec, state: Any) -> dict[str, Any]:
    """The input of a subgraph node's child run: the parent's values of the keys it reads.

    A ``Send`` argument may carry child keys the parent does not have: they go in as given.
    """
    assert node.subgraph is not None
    values = state if isinstance(state, Mapping) else _fields(state)
    inputs = {c: values[p] for c, p in node.inputs.items() if p in values}
    child_keys = node.subgraph.schema.keys
    inputs.update((k, v) for k, v in values.items() if k in child_keys and k not in inputs)
    return inputs


def _fields(state: Any) -> dict[str, Any]:
    fields = getattr(type(state), "model_fields", None)
    if fields is None:
        return dict(vars(state))
    return {k: getattr(state, k) for k in fields}
