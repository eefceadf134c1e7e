"""``Run``: one namespace of a run of a thread, and its superstep loop.

The order of durable writes (DESIGN.md promises 1, 2, 7), all made through the run's
``Committer``:

1. A task that finishes while siblings still run has its record (with its writes) committed
   at once (``TaskRunner``); records that finish together are committed in one transaction.
2. When the last task of a step finishes, the next checkpoint, the changed channel values and
   the thread's head are committed in one transaction (the records of tasks that finished
   with the step are implied by it; a retried task's record is kept for its attempts).
3. A step with a paused or failed task commits the records and pauses and stops; completed
   tasks are reused when the step is planned again (``plan.plan_step``), so they never run
   twice. ``interrupt_after`` commits its step and pauses at the next checkpoint.
4. The run's last commit gives the lease up; answers given to a resume ride on its first.

The namespace's state (values, head, answers), the commit of its checkpoints and its
results are ``RunState`` (``engine.run_state``), which ``Run`` extends with the loop. How a
run starts (a new input, a fork, the answers of a resume) is ``engine.start``; how it is
entered (the lease, reading the resumed step) is ``engine.execute``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.models import TaskId, TaskRecord
from graphflow.engine import plan, start, steps
from graphflow.engine.context import NodeContext
from graphflow.engine.outcomes import RunStopped, StreamClosed, Writes
from graphflow.engine.run_state import RunState
from graphflow.engine.subgraph import child_inputs
from graphflow.engine.tasks import TaskRunner
from graphflow.errors import (
    GraphflowError,
    InvalidRouteError,
    NodeError,
    RecursionLimitError,
    node_exit,
)
from graphflow.spec import GraphSpec, NodeSpec
from graphflow.types import START, RunResult, Send


class Run(RunState):
    """One namespace of a run (its state is ``RunState``'s) and its superstep loop.

    A subgraph task runs a child ``Run`` in its own namespace; it shares the root's store,
    committer, emitter, decisions and known pauses.
    """

    def task_runner(self) -> TaskRunner:
        """A runner of this namespace's tasks for one step. (Made per step, not kept: it
        refers to the run, and a run that referred back would be a reference cycle that only
        the garbage collector frees.)"""
        return TaskRunner(
            self.spec,
            self,
            self.committer,
            self.emitter,
            self.run_subgraph,
            ns=self.ns,
            path_prefix=self.path_prefix,
        )

    # -- the superstep loop ----------------------------------------------------------------
    async def loop(
        self,
        *,
        fresh: bool,
        first: tuple[Mapping[TaskId, TaskRecord], Mapping[TaskId, dict[str, Any]]] | None = None,
    ) -> RunResult:
        """Run supersteps until the frontier is empty or the run pauses. ``fresh``: the head
        was just made (its tasks have no records); ``first``: the head's task records and
        memos, when the caller read them."""
        count = 0
        while True:
            ck = self.head
            if not ck.frontier:
                th = self.thread
                if self.parent is None and th is not None and th.status == "paused":
                    # Continued past a gate after the run's last step: the answers and the
                    # end of the run are committed together.
                    if self.committer is not None:
                        done = CommitBatch.stop("", ThreadUpdate("done", ()))
                        await self.committer.commit(done, last=True)
                    th.status, th.pending_pause_ids = "done", ()
                return self.done_result()
            if count and self.parent is None and self.emitter.reader_gone:
                raise StreamClosed(self.thread_id)  # (the stream's reader is gone)
            if count and self.parent is None and self.should_stop():
                raise RunStopped(self.thread_id)  # between steps: the last one is committed
            count += 1
            if count > self.recursion_limit:
                raise RecursionLimitError(
                    f"thread {self.thread_id!r} ran {self.recursion_limit} supersteps without "
                    f"finishing (recursion_limit); next: {[t.node for t in ck.frontier]}"
                )
            result = await steps.step(self, ck, resumed=not fresh, first=first)
            fresh, first = True, None
            if result is not None:
                return result

    async def route(self, node: str) -> list[str | Send]:
        """Where a node's edges lead on the current state (``START``'s, for an input)."""
        return await route(self.spec, self.values, node, self)

    # -- subgraphs ---------------------------------------------------------------------------
    async def run_subgraph(self, node: NodeSpec, state: Any, ctx: NodeContext) -> Writes:
        """Run (or continue) a subgraph node's child graph in its namespace of the thread;
        return its writes to the parent's keys.

        The child continues from the newest checkpoint of its namespace when there is one
        (a resumed or re-planned parent task), so its completed nodes are never rerun. A
        pause inside it raises ``PauseSignal`` with the stored pause records, pausing the
        parent's task.
        """
        assert node.subgraph is not None
        child = Run(
            node.subgraph,
            self.store,
            self.thread_id,
            committer=self.committer,
            emitter=self.emitter,
            principal=self.principal,
            decisions=self.decisions,
            recursion_limit=self.recursion_limit,
            parent=self,
            ns=plan.child_namespace(self.ns, node.name, ctx.task_id),
            path_prefix=f"{ctx.node}.",
            collect=node.outputs,
        )
        head = None
        if self.store is not None:
            head = await self.store.get_checkpoint(self.thread_id, child.ns)
        if head is None:
            await start.start_input(child, child_inputs(node, state), None, forking=False)
        else:
            child.checkpoint = head
            await child.load_values(head)
        await child.loop(fresh=head is None)
        return Writes((k, v) for k, v in child.hidden.get(plan.OUT_KEY, []))


async def route(
    spec: GraphSpec, values: Mapping[str, Any], node: str, run: Run | None = None
) -> list[str | Send]:
    """Where ``node``'s plain and conditional edges lead on ``values`` (routers are called
    with the state view, and may be async). A router's exception raises ``NodeError``
    naming the router's node (its full name in ``run``) and the thread to retry."""
    edges = spec.edges
    targets: list[str | Send] = list(edges.static.get(node, ()))
    branches = edges.branches.get(node)
    if branches:
        view = spec.schema.view(values)
        for br in branches:
            try:
                res = br.router(view)
                if inspect.isawaitable(res):
                    res = await res
            except GraphflowError:
                raise
            except Exception as e:
                raise _router_error(node, e, run) from e
            except (SystemExit, KeyboardInterrupt) as e:  # as a node's (errors.node_exit)
                failure = node_exit(e, on_thread=False)
                if failure is None:
                    raise  # the user's Ctrl-C
                raise _router_error(node, failure, run) from e
            if res is None:  # (a router that forgot to return: an error, as in LangGraph)
                if br.path_map is None or None not in br.path_map:
                    raise InvalidRouteError(
                        f"conditional edge from {node!r}: its router returned None; return a "
                        "node name, a list of them, Send(...)s or END"
                    )
                res = [None]
            targets += plan.normalize_targets(
                res, spec.nodes, f"conditional edge from {node!r}", br.path_map
            )
    return targets


def _router_error(node: str, error: BaseException, run: Run | None) -> NodeError:
    """The ``NodeError`` of a router of ``node``'s edges; it names the thread to retry,
    unless the router was START's (it runs before a new input is stored)."""
    if run is None:
        return NodeError(node, error, router=True)
    durable = run.committer is not None and node != START
    hint = run.thread_id if durable else None
    return NodeError(run.node_path(node), error, thread_id=hint, router=True)
