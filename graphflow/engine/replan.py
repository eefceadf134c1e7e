"""Where an ``update_state`` leads: the frontier the writers' edges give on the updated state
(``replan``), and whether it is the frontier the checkpoint already has (``same_frontier``:
then its tasks are kept, with their records, memos and pauses).

Kept apart from ``engine.update``, which reads, applies and commits the update: where the
thread goes next has rules of its own (a writer that routes with ``Command(goto=...)`` cannot
be evaluated again; an explicit ``as_node`` advances the join barriers, an implicit one
replays those its step started from).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checkpoints.base import Checkpointer
from checkpoints.models import CheckpointId, CheckpointRecord, TaskSpec
from graphflow.engine import plan
from graphflow.engine.reads import naming
from graphflow.engine.run import route
from graphflow.spec import GraphSpec
from graphflow.types import END


async def replan(
    spec: GraphSpec,
    store: Checkpointer,
    state: dict[str, Any],
    hidden: dict[str, Any],
    ns: str,
    ck_id: CheckpointId,
    writers: list[str],
    base: CheckpointRecord | None,
    *,
    explicit: bool,
) -> tuple[tuple[TaskSpec, ...] | None, dict[str, Any]]:
    """The frontier the writers' edges give on the updated state (None when it cannot be
    told: a writer that routes with ``Command(goto=...)`` has no edges to evaluate), and the
    join barriers an explicit ``as_node`` advanced."""
    if writers == [END]:
        return (), {}
    if not explicit and any(
        spec.nodes[w].destinations is not None for w in writers if w in spec.nodes
    ):
        return None, {}
    targets: list[Any] = []
    for w in writers:
        targets += await route(spec, state, w)
    joins = spec.edges.joins
    changed: dict[str, Any] = {}
    if joins and explicit:
        fired, changed = plan.advance_joins(joins, hidden, writers)
        targets += fired
    elif joins and base is not None:
        # The step's joins fired as they did: the barriers it started from decide.
        keys = {k: v for k, v in base.channel_versions.items() if k.startswith(plan.JOIN_PREFIX)}
        chains = {k: base.channel_bases[k] for k in keys if k in base.channel_bases}
        with naming(base.thread_id, base.id):
            seen = await store.load_channels(base.thread_id, base.ns, keys, chains)
        targets += plan.advance_joins(joins, seen, writers)[0]
    return plan.make_frontier(ck_id, ns, targets), changed


def same_frontier(a: Sequence[TaskSpec], b: Sequence[TaskSpec]) -> bool:
    """Same nodes in the same order, same ``Send`` arguments."""
    if len(a) != len(b):
        return False
    try:
        return all(
            x.node == y.node and x.has_arg == y.has_arg and (not x.has_arg or bool(x.arg == y.arg))
            for x, y in zip(a, b, strict=True)
        )
    except Exception:  # arguments that cannot be compared are not known to be the same
        return False
