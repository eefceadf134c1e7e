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

How a run starts (a new input, a fork, the answers of a resume) is ``engine.start``; how it
is entered (the lease, reading the resumed step) is ``engine.execute``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio.lowlevel

from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.models import (
    AnswerRecord,
    CheckpointRecord,
    DecisionRecord,
    DispatchRecord,
    MemoRecord,
    PauseId,
    PauseRecord,
    TaskId,
    TaskRecord,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
)
from graphflow.decisions import Decision
from graphflow.engine import plan, start, steps
from graphflow.engine.committer import Committer
from graphflow.engine.context import NodeContext
from graphflow.engine.events import Emitter
from graphflow.engine.outcomes import RunStopped, Writes, never
from graphflow.engine.pauses import pause_from_record, task_of
from graphflow.engine.subgraph import child_inputs
from graphflow.engine.tasks import TaskRunner
from graphflow.engine.witness import Witness
from graphflow.errors import RecursionLimitError
from graphflow.evidence import EvidenceLog
from graphflow.spec import GraphSpec, NodeSpec
from graphflow.types import RunResult, Send


class Run:
    """The state of one namespace of a run (values, head, answers) and its loop.

    A subgraph task runs a child ``Run`` in its own namespace; it shares the root's store,
    committer, emitter, decisions and known pauses.
    """

    def __init__(
        self,
        spec: GraphSpec,
        store: Checkpointer | None,
        thread_id: ThreadId,
        *,
        committer: Committer | None,
        emitter: Emitter,
        principal: Any = None,
        decisions: Mapping[str, Decision] | None = None,
        recursion_limit: int = 100,
        parent: Run | None = None,
        ns: str = "",
        path_prefix: str = "",
        collect: Mapping[str, str] | None = None,
        evidence: EvidenceLog | None = None,
    ):
        self.spec = spec
        self.store = store
        self.thread_id = thread_id
        self.committer = committer
        self.emitter = emitter
        self.principal = principal
        self.decisions: Mapping[str, Decision] = decisions or {}
        self.recursion_limit = recursion_limit
        self.parent = parent
        self.ns = ns
        self.path_prefix = path_prefix
        self.collect: Mapping[str, str] = collect or {}
        self.thread: ThreadRecord | None = None
        self.values: dict[str, Any] = {}
        self.hidden: dict[str, Any] = {}
        self.checkpoint: CheckpointRecord | None = None
        self.known_pauses: dict[PauseId, PauseRecord] = (
            parent.known_pauses if parent is not None else {}
        )
        self.answers: dict[str, Any] = {}
        """Answers to pauses of the current frontier's tasks."""
        self.ignored: tuple[DecisionRecord, ...] = ()
        self.decider: str | None = None
        """Who answers, when a decision names no ``by``: the resume's own principal."""
        self.witness: Witness = (
            parent.witness if parent is not None else Witness(evidence, thread_id)
        )
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self.should_stop: Callable[[], bool] = never
        """Asked between supersteps of the root run: True ends the run there
        (``RunStopped``), its last step committed (a worker asked to stop)."""

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

    # -- RunPort (what a node's context asks of its run) ------------------------------------
    @property
    def durable(self) -> bool:
        """Whether the run has a store."""
        return self.committer is not None

    async def save_memo(self, task_id: str, key: str, value: Any) -> None:
        """Commit a memoized step result of a running task."""
        if self.committer is not None:
            await self.committer.memo(self.ns, self.head.id, task_id, key, value)

    async def claim_dispatch(
        self, key: str, tool: str, fingerprint: str | None
    ) -> DispatchRecord | None:
        """Claim a tool call (see ``Committer.claim_dispatch``)."""
        assert self.committer is not None
        return await self.committer.claim_dispatch(key, tool, fingerprint)

    async def complete_dispatch(
        self, key: str, status: str, result: Any, error: str | None
    ) -> None:
        """Record a claimed call's outcome."""
        assert self.committer is not None
        await self.committer.complete_dispatch(key, status, result, error)

    async def record_decision(self, record: DecisionRecord) -> None:
        """Append a decision record."""
        if self.committer is not None:
            await self.committer.decisions([record])

    def emit_custom(self, node: str, step: int, name: str, data: Any) -> None:
        """A node's ``ctx.emit``: a ``custom`` event in debug mode."""
        if self.emitter.debug:
            self.emitter.emit("custom", node, step, {"name": name, "data": data})

    @property
    def token(self) -> anyio.lowlevel.EventLoopToken:
        """The run's event loop, for calls from worker threads; asked for on the loop's
        thread (by the task runner, before a step's sync nodes go to threads). Found when
        first needed: finding it loads anyio's event-loop backend, which a run whose nodes
        never leave the loop's thread need not load (benchmark W4)."""
        root = self.root
        if root._token is None:
            root._token = anyio.lowlevel.current_token()
        return root._token

    @property
    def checkpoint_id(self) -> str | None:
        """The root namespace's checkpoint the run stands on."""
        ck = self.root.checkpoint
        return ck.id if ck is not None else None

    @property
    def root(self) -> Run:
        """The run of the root namespace (this one, or the parent's root)."""
        run = self
        while run.parent is not None:
            run = run.parent
        return run

    # -- state -------------------------------------------------------------------------------
    @property
    def head(self) -> CheckpointRecord:
        """The checkpoint the run stands on (once it started)."""
        assert self.checkpoint is not None, "the run has not started"
        return self.checkpoint

    def set_values(self, values: dict[str, Any]) -> None:
        """Take loaded channel values: the user's state and the engine's own channels."""
        self.hidden = {k: values.pop(k) for k in list(values) if plan.is_hidden(k)}
        self.values = values

    async def load_values(self, ck: CheckpointRecord) -> None:
        """Load and check the channel values of checkpoint ``ck`` of this namespace."""
        assert self.store is not None
        vals = await self.store.load_channels(
            self.thread_id, self.ns, ck.channel_versions, ck.channel_bases
        )
        self.spec.schema.check_loaded(vals, self.thread_id, ck.id)
        self.set_values(vals)

    async def load_answers(self, found: Mapping[PauseId, AnswerRecord] | None = None) -> set[str]:
        """Take the answers to pauses of the head's tasks (earlier pauses of a rerun node
        included), from ``found`` when the caller read them; return the ids of every
        answered pause of the thread (nested ones too)."""
        assert self.store is not None
        if found is None:
            found = await self.store.load_answers(self.thread_id)
        stored = {k: a.value for k, a in found.items()}
        if self.committer is not None:  # not yet written
            stored.update((a.pause_id, a.value) for a in self.committer.held_answers)
        tasks = {t.id for t in self.head.frontier}
        self.answers = {k: v for k, v in stored.items() if task_of(k) in tasks}
        return set(stored)

    def node_path(self, node: str) -> str:
        """A node's dotted path from the root graph (``review.check``)."""
        return f"{self.path_prefix}{node}"

    # -- commits -----------------------------------------------------------------------------
    async def commit_checkpoint(
        self,
        ck: CheckpointRecord,
        writes: list[Any],
        *,
        tasks: Sequence[TaskRecord] = (),
        pauses: Sequence[PauseRecord] = (),
        memos: Sequence[MemoRecord] = (),
        durable: bool = True,
    ) -> None:
        """Commit ``ck`` as the new head of this namespace; with ``pauses`` the run stops at
        it (paused)."""
        frontier = ck.frontier
        status: ThreadStatus = "paused" if pauses else "running" if frontier else "done"
        pending = tuple(p.id for p in pauses)
        th = self.thread
        # The thread row changes only when its status or pending pauses do (a backend may then
        # skip rewriting the row's indexed columns on every step).
        unchanged = self.parent is not None or (
            th is not None
            and th.status == status
            and not th.pending_pause_ids
            and not pending
            and (self.spec.name is None or th.graph_name == self.spec.name)
        )
        if self.committer is not None:
            thread = None if unchanged else ThreadUpdate(status, pending, self.spec.name)
            expected = th.head if th is not None else None
            if durable:
                batch = CommitBatch.step(ck, writes, tasks=tasks, pauses=pauses, memos=memos,
                                         thread=thread, expected_head=expected,
                                         check_head=self.parent is None)  # fmt: skip
            else:  # a run's input (engine.start): nothing durable depends on it yet
                assert not tasks and not pauses and not memos
                batch = CommitBatch.input(
                    ck,
                    writes,
                    thread=thread,
                    expected_head=expected,
                    check_head=self.parent is None,
                )
            await self.committer.commit(batch, last=not frontier or bool(pauses))
            if th is None and self.parent is None:  # the commit created the thread
                th = self.thread = ThreadRecord(
                    self.thread_id, status, ck.id, self.spec.name, self.committer.owner
                )
        if th is not None:
            th.head, th.status, th.pending_pause_ids = ck.id, status, pending
        self.checkpoint = ck
        self.known_pauses = {} if self.parent is None else self.known_pauses
        if self.emitter.debug:
            next_nodes = [t.node for t in frontier]
            data = {"checkpoint_id": ck.id, "next": next_nodes}
            self.emitter.emit("checkpoint", None, ck.step, data)

    # -- results -----------------------------------------------------------------------------
    def done_result(self) -> RunResult:
        """The result of a run whose frontier is empty."""
        view = self.spec.schema.view(self.values)
        if self.parent is None:
            self.emitter.emit("done", None, self.head.step, view)
        return RunResult("done", view, [], self.thread_id, self.head.id, self.root.ignored)

    def paused_result(self, pauses: Sequence[PauseRecord]) -> RunResult:
        """The result of a run that waits for answers to ``pauses``."""
        public = [pause_from_record(p) for p in pauses]
        step = self.checkpoint.step + 1 if self.checkpoint is not None else None
        for p in public:
            self.emitter.emit("pause", p.node, step, p)
        self.emitter.emit("paused", None, None, public)
        ck_id = self.checkpoint.id if self.checkpoint is not None else None
        view = self.spec.schema.view(self.values)
        return RunResult("paused", view, public, self.thread_id, ck_id, self.root.ignored)

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
        return await route(self.spec, self.values, node)

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


async def route(spec: GraphSpec, values: Mapping[str, Any], node: str) -> list[str | Send]:
    """Where ``node``'s plain and conditional edges lead on ``values`` (routers are called
    with the state view, and may be async)."""
    edges = spec.edges
    targets: list[str | Send] = list(edges.static.get(node, ()))
    branches = edges.branches.get(node)
    if branches:
        view = spec.schema.view(values)
        for br in branches:
            res = br.router(view)
            if inspect.isawaitable(res):
                res = await res
            targets += plan.normalize_targets(
                res, spec.nodes, f"conditional edge from {node!r}", br.path_map
            )
    return targets
