"""``RunState``: one namespace of a run as its steps see it: its values, head and answers,
the commits of its checkpoints, its results, and the ``RunPort`` its nodes' contexts use.

``Run`` (``engine.run``) is this state with what drives it: the superstep loop, a task
runner per step and the child runs of subgraph tasks. The split keeps what a step reads and
writes of its namespace (all that ``engine.steps`` and ``engine.start`` use, besides the
task runner and routing) apart from the loop. It is a base class rather than an object the
run holds, so the step loop reaches each attribute and method directly: the split adds no
object and no call per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio.lowlevel

from checkpoints.base import Checkpointer
from checkpoints.batch import CommitBatch, ThreadUpdate
from checkpoints.models import (
    AnswerRecord,
    CallId,
    CheckpointRecord,
    DecisionRecord,
    DispatchRecord,
    MemoRecord,
    PauseId,
    PauseRecord,
    TaskRecord,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
)
from graphflow.decisions import Decision
from graphflow.engine import plan
from graphflow.engine.committer import Committer
from graphflow.engine.events import Emitter
from graphflow.engine.outcomes import never
from graphflow.engine.pauses import pause_from_record, task_of
from graphflow.engine.witness import Witness
from graphflow.evidence import EvidenceLog
from graphflow.spec import GraphSpec
from graphflow.types import RunResult


class RunState:
    """The state of one namespace of a run (values, head, answers), its commits and results.

    A subgraph task's child run shares the root's store, committer, emitter, decisions and
    known pauses.
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
        parent: RunState | None = None,
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
        self.freezes: list[str] = parent.freezes if parent is not None else []
        """Why tasks of this step froze the thread (shared with the child runs): once one
        has, no sibling's tool call is dispatched (``NodeContext.dispatch_once``)."""
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self.should_stop: Callable[[], bool] = never
        """Asked between supersteps of the root run: True ends the run there
        (``RunStopped``), its last step committed (a worker asked to stop)."""

    # -- RunPort (what a node's context asks of its run) ------------------------------------
    @property
    def durable(self) -> bool:
        """Whether the run has a store."""
        return self.committer is not None

    @property
    def frozen(self) -> str | None:
        """Why a task of this run froze the thread, or None."""
        return self.freezes[0] if self.freezes else None

    def note_freeze(self, reason: str) -> None:
        """A task is freezing the thread: nothing is dispatched from now on."""
        self.freezes.append(reason)

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

    async def dispatch_record(self, key: str) -> DispatchRecord | None:
        """The dispatch record of ``key`` in the thread, or None."""
        assert self.store is not None
        return await self.store.get_dispatch(self.thread_id, CallId(key))

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
    def root(self) -> RunState:
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
                    expected_status=th.status if th is not None else None,
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
            # A subgraph's checkpoint names its subgraph node and namespace (the root's: None, "")
            where = self.path_prefix[:-1] or None
            data = {"checkpoint_id": ck.id, "next": [t.node for t in frontier], "ns": ck.ns}
            self.emitter.emit("checkpoint", where, ck.step, data)

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
