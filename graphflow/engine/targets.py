"""Where an ``update_state`` applies: the namespace, graph and checkpoint it names, and the
nodes that wrote that checkpoint's step (``engine.update``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpoints.base import Checkpointer
from checkpoints.errors import damaged, head_missing
from checkpoints.models import CheckpointId, CheckpointRecord, TaskSpec, ThreadRecord
from graphflow.engine import plan
from graphflow.errors import InvalidArgumentError
from graphflow.spec import GraphSpec, NodeSpec
from graphflow.types import START


@dataclass(slots=True)
class Target:
    """Where an update applies: a namespace of the thread, its graph and checkpoint."""

    spec: GraphSpec
    ns: str
    ck: CheckpointRecord | None
    at_head: bool
    """``ck`` is the newest checkpoint of ``ns`` (else the update forks from it)."""
    path: list[tuple[str, CheckpointRecord, TaskSpec]] = field(default_factory=list)
    """For a subgraph's namespace: each ancestor namespace, its head and the task running
    the next level."""
    node: NodeSpec | None = None
    """The subgraph node whose child runs in ``ns``."""


async def locate(
    spec: GraphSpec, store: Checkpointer, th: ThreadRecord | None, checkpoint_id: str | None
) -> Target:
    """The namespace, graph and checkpoint an update applies to."""
    if th is None or th.head is None:
        return Target(spec, "", None, True)
    tid = th.thread_id
    head = await store.get_checkpoint(tid, "", th.head)
    if head is None:
        raise head_missing(tid, th.head)
    if checkpoint_id is None or checkpoint_id == head.id:
        return Target(spec, "", head, True)
    ck = await store.get_checkpoint(tid, "", CheckpointId(checkpoint_id))
    if ck is not None:
        return Target(spec, "", ck, False)
    found = await find_in_children(spec, store, head, CheckpointId(checkpoint_id), [])
    if found is None:
        raise InvalidArgumentError(
            f"thread {tid!r} has no checkpoint {checkpoint_id!r} (in its history or in "
            "the namespace of a pending subgraph task)"
        )
    return found


async def find_in_children(
    spec: GraphSpec,
    store: Checkpointer,
    ck: CheckpointRecord,
    wanted: CheckpointId,
    path: list[tuple[str, CheckpointRecord, TaskSpec]],
) -> Target | None:
    """Search the namespaces of ``ck``'s pending subgraph tasks, depth first."""
    for task in ck.frontier:
        node = spec.nodes.get(task.node)
        if node is None or node.subgraph is None:
            continue
        inner = plan.child_namespace(ck.ns, task.node, task.id)
        newest = await store.get_checkpoint(ck.thread_id, inner)
        if newest is None:
            continue
        here = [*path, (ck.ns, ck, task)]
        if newest.id == wanted:
            return Target(node.subgraph, inner, newest, True, here, node)
        found = await store.get_checkpoint(ck.thread_id, inner, wanted)
        if found is not None:
            return Target(node.subgraph, inner, found, False, here, node)
        deeper = await find_in_children(node.subgraph, store, newest, wanted, here)
        if deeper is not None:
            return deeper
    return None


async def writers(
    store: Checkpointer, ck: CheckpointRecord
) -> tuple[list[str], CheckpointRecord | None]:
    """The nodes that wrote ``ck``'s step and the checkpoint that step started from.

    An input's checkpoint was written by the input (``START``); a step's by its tasks'
    nodes; an ``update_state`` by its ``as_node``. Forks, cancels and updates that named
    no node pass the question on to the checkpoint they copy.
    """
    tid = ck.thread_id
    while True:
        parent = None
        if ck.parent_id is not None and ck.source != "input":
            parent = await store.get_checkpoint(tid, ck.ns, ck.parent_id)
            if parent is None:
                raise damaged(
                    f"thread {tid!r}: checkpoint {ck.parent_id!r}, the parent of "
                    f"{ck.id!r}, is missing",
                    thread_id=tid,
                    checkpoint_id=ck.id,
                )
        if ck.source == "input" or parent is None:
            return [START], None
        if ck.source == "loop":
            return sorted({t.node for t in parent.frontier}), parent
        writer = ck.metadata.get("as_node") if ck.source == "update" else None
        if isinstance(writer, str):
            return [writer], parent
        ck = parent
