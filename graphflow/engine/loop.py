"""One run of a thread: take the lease, load the head, execute supersteps, commit each.

The order of durable writes (DESIGN.md promises 1, 2, 7):
0. A new input's checkpoint is written first, taking the thread's lease in the same
   transaction (a resume takes the lease first instead); nothing runs before it.
1. A task that finishes while siblings still run has its record (with its writes) committed
   at once; records that finish together are committed in one transaction.
2. When the last task of a step finishes, the next checkpoint, the changed channel values and
   the thread's head are committed in one transaction (the records of tasks that finished
   with the step are implied by it; a retried task's record is kept for its attempts).
3. A step with a paused or failed task commits the records and pauses and stops; completed
   tasks are reused when the step is planned again, so they never run twice.
4. The run's last commit gives the lease up; answers given to a resume ride on its first.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectSendStream

from checkpoints.errors import (
    CorruptCheckpointError,
    HeadConflictError,
    LeaseHeldError,
    LeaseLostError,
)
from checkpoints.keeper import keeper
from checkpoints.lease import new_owner
from checkpoints.models import (
    AnswerRecord,
    ChannelWrite,
    CheckpointId,
    CheckpointRecord,
    CommitBatch,
    DecisionRecord,
    MemoRecord,
    PauseId,
    PauseRecord,
    ResumePoint,
    TaskId,
    TaskRecord,
    TaskSpec,
    ThreadId,
    ThreadRecord,
    ThreadStatus,
    ThreadUpdate,
    new_checkpoint_id,
    next_version,
    now,
)
from graphflow.decisions import Decision
from graphflow.engine import answers, plan
from graphflow.engine.apply import COMPACT_EVERY, apply_writes, set_write
from graphflow.engine.context import (
    EngineFault,
    PauseRequest,
    PauseSignal,
)
from graphflow.engine.pauses import UNSET, make_pause_id
from graphflow.engine.start import RunStart
from graphflow.engine.tasks import Outcome, TaskRunner
from graphflow.errors import (
    GraphflowError,
    InvalidArgumentError,
    NodeError,
    RecursionLimitError,
    ThreadBusyError,
    ThreadCancelledError,
    ThreadNotFoundError,
    ThreadPausedError,
)
from graphflow.types import (
    START,
    Event,
    RunResult,
    Send,
)

if TYPE_CHECKING:
    from checkpoints import Checkpointer
    from graphflow.compiled import CompiledGraph


class _NotNew(Exception):
    """The input commit of a run that assumed a new thread found the thread existing."""


class Run(RunStart, TaskRunner):
    """The execution of one ``invoke``/``stream`` call on one thread."""

    def __init__(
        self,
        graph: CompiledGraph,
        *,
        thread_id: str,
        principal: Any = None,
        decisions: Mapping[str, Any] | None = None,
        recursion_limit: int = 100,
        sink: MemoryObjectSendStream[Event] | None = None,
        mode: str = "values",
        parent: Run | None = None,
        ns: str = "",
        path_prefix: str = "",
        collect: Mapping[str, str] | None = None,
    ):
        self.graph = graph
        self.parent = parent
        self.store: Checkpointer | None = parent.store if parent else graph.checkpointer
        self.thread_id = ThreadId(thread_id)
        self.ns = ns
        self.path_prefix = path_prefix
        self.collect: Mapping[str, str] = collect or {}
        self.principal = principal
        self.decisions: Mapping[str, Decision] = (
            parent.decisions if parent else answers.check_decisions(decisions)
        )
        self.ignored: tuple[DecisionRecord, ...] = ()
        self.recursion_limit = recursion_limit
        self.sink = sink
        self.mode = mode
        self.owner: str = parent.owner if parent else new_owner()
        self.thread: ThreadRecord | None = None
        self.values: dict[str, Any] = {}
        self.hidden: dict[str, Any] = {}
        self.checkpoint: CheckpointRecord | None = None
        self.known_pauses: dict[PauseId, PauseRecord] = parent.known_pauses if parent else {}
        self.answers: dict[str, Any] = {}
        self._loop_thread: int = parent._loop_thread if parent else threading.get_ident()
        # For events sent from worker threads (sync nodes of parallel steps); only with a sink.
        self.token: anyio.lowlevel.EventLoopToken | None = (
            parent.token if parent else anyio.lowlevel.current_token() if sink else None
        )
        self._unflushed: list[TaskRecord] = []  # records of this step's finished tasks
        self._unrecorded: list[Outcome] = []  # outcomes of this step's tasks with no record yet
        self._lease_on_commit = False  # the next commit takes the lease (a new input)
        self._guessing_new = False  # that commit assumes a new thread (see _execute_leased)
        self._released = False  # the run's last commit gave the lease up
        self._pending_answers: list[AnswerRecord] = []  # go with the run's first commit
        # What ``resume_thread`` read, until used (a resumed run of the root namespace).
        self._pre_head: CheckpointRecord | None = None
        self._pre_pauses: list[PauseRecord] | None = None
        self._pre_answers: dict[PauseId, AnswerRecord] | None = None
        self._pre_step: (
            tuple[str, dict[TaskId, TaskRecord], dict[TaskId, dict[str, Any]]] | None
        ) = None
        self._running = 0
        self._flush_lock: anyio.Lock | None = None  # made by the first parallel step

    # -- identities ---------------------------------------------------------------------
    def pause_id(self, task_id: str, key: str) -> str:
        """The stable id of a task's pause (unique in the thread: task ids are)."""
        return make_pause_id(task_id, key)

    # -- events ---------------------------------------------------------------------------
    def _emit(self, type_: str, node: str | None, step: int | None, data: Any) -> None:
        if self.sink is not None:
            ev = Event(type_, node, step, data, self.thread_id)
            if threading.get_ident() == self._loop_thread:
                self.sink.send_nowait(ev)
            else:
                anyio.from_thread.run_sync(self.sink.send_nowait, ev, token=self.token)

    def emit_custom(self, node: str, step: int, name: str, data: Any) -> None:
        """A node's ``ctx.emit``: a ``custom`` event in debug mode."""
        if self.mode == "debug":
            self._emit("custom", node, step, {"name": name, "data": data})

    # -- storage helpers ------------------------------------------------------------------
    async def _commit(self, batch: CommitBatch, *, last: bool = False) -> None:
        """Commit under the lease; ``last`` gives the lease up in the same transaction."""
        if self.store is None:
            return
        if self._lease_on_commit:
            batch.acquire_ttl = self.graph.lease_ttl
        root = self._root()
        if root._pending_answers:
            batch.answers = [*root._pending_answers, *batch.answers]
        batch.release = last and self.parent is None
        try:
            await self.store.commit(self.thread_id, self.owner, batch)
        except LeaseHeldError as e:
            if self._guessing_new:
                raise _NotNew from e
            raise ThreadBusyError(self.thread_id, e.owner) from e
        except (LeaseLostError, HeadConflictError) as e:
            if self._guessing_new:
                raise _NotNew from e
            raise ThreadBusyError(self.thread_id, None) from e
        self._guessing_new = False
        self._lease_on_commit = False
        root._pending_answers = []
        self._released = batch.release

    async def flush_answers(self) -> None:
        """Write this call's answers now (before a side effect that must see them durable)."""
        if self._root()._pending_answers:
            await self._commit(CommitBatch(ns=self.ns))

    async def save_memo(self, task_id: str, key: str, value: Any) -> None:
        """Commit a memoized step result of a running task (``ctx.step_once``)."""
        assert self.checkpoint is not None
        memo = MemoRecord(self.checkpoint.id, TaskId(task_id), key, value)
        await self._commit(CommitBatch(ns=self.ns, memos=[memo]))

    # -- entry point ------------------------------------------------------------------------
    async def execute(
        self, input: Any, *, resume: Any = UNSET, checkpoint_id: str | None = None
    ) -> RunResult:
        """Run the thread until its frontier is empty or it pauses."""
        if input is not None and (resume is not UNSET or self.decisions):
            raise InvalidArgumentError(
                "give either an input (a new run) or resume=/decisions= (answers), not both"
            )
        try:
            return await self._execute_leased(input, resume, checkpoint_id)
        except EngineFault as fault:
            raise fault.error from fault.error.__cause__

    async def _execute_leased(
        self, input: Any, resume: Any, checkpoint_id: str | None
    ) -> RunResult:
        store = self.store
        if store is None:
            self.graph._check_resumable()
            return await self._execute(input, resume, checkpoint_id)
        await self.graph._ensure_setup(self.thread_id)
        keeper().start()
        if input is None:
            ttl, name = self.graph.lease_ttl, self.graph.name
            try:
                if checkpoint_id is None:
                    # The lease and everything the resumed step reads, in one transaction.
                    point = await store.resume_thread(self.thread_id, self.owner, ttl)
                    if point is None:
                        raise ThreadNotFoundError(self.thread_id)
                    self._preload(point)
                else:
                    existing = await store.get_thread(self.thread_id)
                    if existing is None or existing.head is None:
                        raise ThreadNotFoundError(self.thread_id)
                    self.thread = await store.acquire_lease(
                        self.thread_id, self.owner, ttl, graph_name=name
                    )
            except LeaseHeldError as e:
                answering = resume is not UNSET or bool(self.decisions)
                raise ThreadBusyError(self.thread_id, e.owner, answering=answering) from e
        else:
            # A new input's checkpoint is the run's first write, made before any node runs:
            # it takes the lease in the same transaction (compare-and-set on the head), which
            # saves a separate fsync'd commit.
            self._lease_on_commit = True
            if checkpoint_id is None and START not in self.graph.edges.branches:
                # Most inputs start a new thread: commit against no head, without reading
                # the thread first. One that exists makes that commit fail untouched (head
                # or lease conflict), and the input is then applied to what it holds.
                self._guessing_new = True
            else:
                self.thread = await store.get_thread(self.thread_id)
        held = keeper().hold(store, self.thread_id, self.owner, self.graph.lease_ttl)
        try:
            try:
                return await self._execute(input, resume, checkpoint_id)
            except _NotNew:
                self._guessing_new = False
                self.values, self.hidden = {}, {}
                self.thread = await store.get_thread(self.thread_id)
                return await self._execute(input, resume, checkpoint_id)
        except CorruptCheckpointError:
            raise  # damage: write nothing more to the file
        except Exception:
            await self._mark_failed()
            raise
        finally:
            keeper().drop(held)
            if not self._released:  # (a no-op when this run never got the lease)
                with anyio.CancelScope(shield=True):
                    await store.release_lease(self.thread_id, self.owner)

    async def _mark_failed(self) -> None:
        """After an error that stopped the run mid-way (a value that cannot be stored, the
        recursion limit, a storage failure), leave the thread ``failed``, never ``running``
        without a live owner; ``invoke(None)`` continues it from its last checkpoint. A
        thread this run has not written (still paused, or never created) is left as it was."""
        th = self.thread
        if self.store is None or th is None or th.status != "running" or self._released:
            return
        batch = CommitBatch(thread=ThreadUpdate("failed", (), self.graph.name), release=True)
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self.store.commit(self.thread_id, self.owner, batch)
            self._released = True
            th.status = "failed"

    async def run_child(self, input_values: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """Run this subgraph run inside its parent's task; return its writes to parent keys.

        It continues from the newest checkpoint of its namespace when there is one (a resumed
        or re-planned parent task), so its completed nodes are never rerun. A pause inside it
        raises ``PauseSignal`` carrying the stored pause records, pausing the parent task.
        """
        head = None
        if self.store is not None:
            head = await self.store.get_checkpoint(self.thread_id, self.ns)
        if head is None:
            await self._start_input(dict(input_values), None, False)
        else:
            self.checkpoint = head
            await self._load_values(head)
        await self._loop(fresh=head is None)
        return [(k, v) for k, v in self.hidden.get(plan.OUT_KEY, [])]

    async def _execute(self, input: Any, resume: Any, checkpoint_id: str | None) -> RunResult:
        store = self.store
        thread = self.thread
        head: CheckpointRecord | None = None
        if store is not None and thread is not None:
            ck_id = checkpoint_id or thread.head
            if self._pre_head is not None:
                head, self._pre_head = self._pre_head, None
                self.graph.schema.check_loaded(self.values, self.thread_id, head.id)
            elif ck_id is not None:
                head = await store.get_checkpoint(self.thread_id, self.ns, CheckpointId(ck_id))
                if head is None and checkpoint_id is None:
                    raise CorruptCheckpointError(
                        f"thread {self.thread_id!r}: head checkpoint {ck_id!r} is missing",
                        thread_id=self.thread_id,
                        checkpoint_id=ck_id,
                    )
                if head is None:
                    raise InvalidArgumentError(
                        f"thread {self.thread_id!r} has no checkpoint {ck_id!r}"
                    )
                await self._load_values(head)
        elif input is None:
            raise ThreadNotFoundError(self.thread_id)
        forking = checkpoint_id is not None and thread is not None and checkpoint_id != thread.head
        if input is not None:
            if (
                thread is not None
                and thread.status == "paused"
                and thread.pending_pause_ids
                and not forking
            ):
                raise ThreadPausedError(self.thread_id, thread.pending_pause_ids)
            await self._start_input(input, head, forking)
        else:
            assert head is not None and thread is not None
            if forking:
                await self._fork(head)
            else:
                if thread.status == "cancelled":
                    raise ThreadCancelledError(self.thread_id)
                self.checkpoint = head
                early = await self._take_answers(resume)
                if early is not None:
                    return early
        return await self._loop(fresh=input is not None or forking)

    def _preload(self, point: ResumePoint) -> None:
        """Keep what ``resume_thread`` read for the resumed step (each piece used once)."""
        self.thread = point.thread
        self._pre_head = point.checkpoint
        self._set_values(point.channels)
        self._pre_pauses = point.pauses
        self._pre_answers = point.answers
        self._pre_step = (point.checkpoint.id, point.tasks, point.memos)

    async def _load_values(self, ck: CheckpointRecord) -> None:
        assert self.store is not None
        vals = await self.store.load_channels(
            self.thread_id, self.ns, ck.channel_versions, ck.channel_bases
        )
        self.graph.schema.check_loaded(vals, self.thread_id, ck.id)
        self._set_values(vals)

    def _set_values(self, vals: dict[str, Any]) -> None:
        self.hidden = {k: vals.pop(k) for k in list(vals) if plan.is_hidden(k)}
        self.values = vals

    async def _commit_checkpoint(
        self,
        ck: CheckpointRecord,
        writes: list[Any],
        frontier: Sequence[TaskSpec],
        tasks: list[TaskRecord] | None = None,
        *,
        durable: bool = True,
        pauses: Sequence[PauseRecord] = (),
    ) -> None:
        """Commit ``ck`` as the new head; with ``pauses`` the run stops at it (paused)."""
        status: ThreadStatus = "paused" if pauses else "running" if frontier else "done"
        pending = tuple(p.id for p in pauses)
        th = self.thread
        expected = th.head if th is not None else None
        # The thread row changes only when its status or pending pauses do (a backend may then
        # skip rewriting the row's indexed columns on every step).
        unchanged = self.parent is not None or (
            th is not None
            and th.status == status
            and not th.pending_pause_ids
            and not pending
            and (self.graph.name is None or th.graph_name == self.graph.name)
        )
        await self._commit(
            CommitBatch(
                ns=self.ns,
                tasks=tasks or [],
                checkpoint=ck,
                channels=writes,
                pauses=list(pauses),
                thread=None if unchanged else ThreadUpdate(status, pending, self.graph.name),
                expected_head=expected,
                check_head=self.parent is None,
                durable=durable,
            ),
            last=not frontier or bool(pauses),
        )
        if self.thread is None and self.parent is None and self.store is not None:
            # The commit created the thread (a new input takes the lease as it commits).
            self.thread = ThreadRecord(self.thread_id, status, ck.id, self.graph.name, self.owner)
        if self.thread is not None:
            self.thread.head = ck.id
            self.thread.status = status
            self.thread.pending_pause_ids = pending
        self.checkpoint = ck
        self.known_pauses = {}
        if self.sink is not None and self.mode == "debug":
            self._emit(
                "checkpoint",
                None,
                ck.step,
                {"checkpoint_id": ck.id, "next": [t.node for t in frontier]},
            )

    def _root(self) -> Run:
        run = self
        while run.parent is not None:
            run = run.parent
        return run

    # -- the superstep loop -------------------------------------------------------------------
    async def _loop(self, *, fresh: bool) -> RunResult:
        steps = 0
        while True:
            ck = self.checkpoint
            assert ck is not None
            if not ck.frontier:
                th = self.thread
                if self.parent is None and th is not None and th.status == "paused":
                    # Continued past a gate after the run's last step: the answers and the
                    # end of the run are committed together.
                    await self._commit(CommitBatch(thread=ThreadUpdate("done", ())), last=True)
                    th.status, th.pending_pause_ids = "done", ()
                if self.parent is None:
                    self._emit("done", None, ck.step, self.graph.schema.view(self.values))
                return RunResult(
                    "done",
                    self.graph.schema.view(self.values),
                    [],
                    self.thread_id,
                    ck.id,
                    self._root().ignored,
                )
            steps += 1
            if steps > self.recursion_limit:
                raise RecursionLimitError(
                    f"thread {self.thread_id!r} ran {self.recursion_limit} supersteps without "
                    f"finishing (recursion_limit); next: {[t.node for t in ck.frontier]}"
                )
            result = await self._step(ck, resumed=not fresh)
            fresh = True
            if result is not None:
                return result

    async def _step(self, ck: CheckpointRecord, *, resumed: bool) -> RunResult | None:
        step = ck.step + 1
        records: Mapping[TaskId, TaskRecord] = {}
        memos: Mapping[TaskId, dict[str, Any]] = {}
        gates: list[PauseRecord] = []
        if resumed and self.store is not None:
            pre, self._pre_step = self._pre_step, None
            if pre is not None and pre[0] == ck.id:
                records, memos = pre[1], pre[2]
            else:
                records = await self.store.load_tasks(self.thread_id, self.ns, ck.id)
                memos = await self.store.load_memos(self.thread_id, self.ns, ck.id)
            # Gates after a committed step hold the next one until they are answered, also
            # when another pause of the thread was: this namespace's, and those of subgraph
            # tasks (a child whose run ended at its gate never reaches its own check).
            gates = [p for p in self.known_pauses.values() if p.kind == "after"]
            if not self.answers or gates:
                answered = await self._load_answers()
                gates = [p for p in gates if p.id not in answered]
                held = [p for p in gates if p.ns == self.ns]
                if held:
                    return await self._stop(ck, step, [], [], held)
        outcomes: dict[TaskId, Outcome] = {}
        to_run: list[TaskSpec] = []
        pauses: list[tuple[TaskSpec, PauseRequest]] = []
        before = self.graph.interrupt_before
        for spec in ck.frontier:
            rec = records.get(spec.id)
            if rec is not None and rec.status == "completed" and rec.writes is not None:
                outcomes[spec.id] = Outcome(
                    spec, "completed", list(rec.writes), rec.routes, attempts=rec.attempts
                )
                continue
            if gates:  # (subgraph.child_namespace, which imports this module)
                inner = f"{self.ns}|{spec.node}:{spec.id}" if self.ns else f"{spec.node}:{spec.id}"
                mine = [p for p in gates if p.ns == inner or p.ns.startswith(inner + "|")]
                if mine:  # the task stays paused at its child's gate
                    outcomes[spec.id] = Outcome(spec, "paused", nested=mine)
                    continue
            if spec.node in before and self.pause_id(spec.id, "before") not in self.answers:
                pauses.append((spec, PauseRequest("before", "before", {"node": spec.node})))
            to_run.append(spec)
        if pauses:
            # A gate on any task holds the whole step (as LangGraph's breakpoints do): its
            # siblings wait with it, and continuing releases the step at once.
            return await self._stop(ck, step, [], pauses, [])
        if to_run:
            await self._run_tasks(to_run, step, ck, memos, records, outcomes)
        ordered = [outcomes[s.id] for s in ck.frontier if s.id in outcomes]
        failed = [o for o in ordered if o.status == "failed"]
        nested: list[PauseRecord] = []
        for o in ordered:
            if o.status == "paused":
                pauses += [(o.spec, p) for p in o.pauses]
                nested += o.nested
        if failed or pauses or nested:
            return await self._stop(ck, step, failed, pauses, nested)
        after = self.graph.interrupt_after
        gated = (
            [
                o.spec
                for o in ordered
                if o.spec.node in after
                # (a gate answered at this checkpoint: one a thread stored before gates
                # committed their step)
                and self.pause_id(o.spec.id, "after") not in self.answers
            ]
            if after
            else []
        )
        return await self._advance(ck, step, ordered, gated)

    def _node_path(self, node: str) -> str:
        return f"{self.path_prefix}{node}"

    async def _stop(
        self,
        ck: CheckpointRecord,
        step: int,
        failed: list[Outcome],
        pauses: list[tuple[TaskSpec, PauseRequest]],
        nested: list[PauseRecord],
    ) -> RunResult:
        records = self._unflushed + [self._record(ck, o) for o in self._unrecorded]
        self._unflushed, self._unrecorded = [], []
        created = now()
        new_pauses: list[PauseRecord] = []
        all_pauses: list[PauseRecord] = []
        root_ck = self._root().checkpoint or ck
        for spec, req in pauses:
            pid = PauseId(self.pause_id(spec.id, req.key))
            rec = self.known_pauses.get(pid)
            if rec is None:
                rec = PauseRecord(
                    pid,
                    self.thread_id,
                    self.ns,
                    # The thread's checkpoint (the root's), also for a pause inside a subgraph:
                    # it is the one get_state(checkpoint_id=...) and a fork can start from.
                    root_ck.id,
                    spec.id,
                    self._node_path(spec.node),
                    req.kind,
                    req.value,
                    created,
                )
                new_pauses.append(rec)
                self.known_pauses[pid] = rec
            all_pauses.append(rec)
        all_pauses += nested  # pauses of subgraph tasks, stored by the subgraph runs
        pending = tuple(p.id for p in all_pauses)
        status: ThreadStatus = "failed" if failed else "paused"
        await self._commit(
            CommitBatch(
                ns=self.ns,
                tasks=records,
                pauses=new_pauses,
                thread=None if self.parent else ThreadUpdate(status, pending, self.graph.name),
            ),
            last=True,
        )
        if self.thread is not None:
            self.thread.status = status
            self.thread.pending_pause_ids = pending
        if failed:
            first = failed[0]
            err = first.error
            assert err is not None
            if isinstance(err, GraphflowError):
                raise err
            raise NodeError(
                self._node_path(first.spec.node),
                err,
                thread_id=self.thread_id if self.store is not None else None,
            ) from err
        if self.parent is not None:
            raise PauseSignal([], records=all_pauses)  # pauses the parent's task
        return self._paused_result(all_pauses)

    async def _advance(
        self, ck: CheckpointRecord, step: int, ordered: list[Outcome], gated: list[TaskSpec]
    ) -> RunResult | None:
        """Apply a finished step and commit the next checkpoint; with ``gated`` tasks (of
        ``interrupt_after`` nodes), pause at that checkpoint in the same transaction."""
        schema = self.graph.schema
        by_name = sorted(ordered, key=lambda o: o.spec.node) if len(ordered) > 1 else ordered
        version = next_version()
        hidden = self.hidden
        applied = apply_writes(
            schema,
            {**self.values, **hidden} if hidden else self.values,
            ck.channel_versions,
            ck.channel_bases,
            [(o.spec.node, o.writes) for o in by_name],
            version,
        )
        if hidden:
            self.values = {k: v for k, v in applied.values.items() if not plan.is_hidden(k)}
        else:  # (only an engine write adds a hidden key: joins, below; a subgraph's output)
            self.values = applied.values
        if self.sink is not None:
            if self.mode in ("updates", "debug"):
                for data in self._step_updates(by_name):
                    self._emit("updates", None, step, data)
            if self.mode == "values" and self.parent is None:
                self._emit("values", None, step, schema.view(self.values))
        targets: list[str | Send] = []
        for o in by_name:
            if o.routes is not None:
                targets += o.routes
            else:
                targets += await self._route_from(o.spec.node, o)
        edges = self.graph.edges
        extra: dict[str, Any] = {}
        if edges.joins:
            fired, changed = plan.advance_joins(
                edges.joins, self.hidden, [o.spec.node for o in by_name]
            )
            targets += fired
            for k, v in changed.items():
                self.hidden[k] = v
                extra[k] = v
        writes = applied.writes
        versions = applied.versions
        for k, v in extra.items():
            writes.append(set_write(k, version, v))
            versions[k] = version
        if self.collect:  # a subgraph run keeps what it wrote to its parent's keys
            out = [[self.collect[k], v] for o in by_name for k, v in o.writes if k in self.collect]
            if out:
                self._collect_out(out, version, versions, applied.bases, writes)
        ck_id = new_checkpoint_id()
        frontier = plan.make_frontier(ck_id, self.ns, targets)
        new = CheckpointRecord(
            ck_id,
            self.thread_id,
            self.ns,
            ck.id,
            step,
            "loop",
            versions,
            frontier,
            {},
            now(),
            applied.bases,
        )
        # Records finishing with the step need not be stored: the checkpoint that applies
        # them says they completed. Only a retried task's record (its attempts) is kept.
        records = [r for r in self._unflushed if r.attempts > 1]
        records += [self._record(ck, o) for o in self._unrecorded if o.attempts > 1]
        self._unflushed, self._unrecorded = [], []
        for r in records:
            r.writes = None
        gates = self._after_gates(new, gated) if gated else []
        await self._commit_checkpoint(new, writes, frontier, records, pauses=gates)
        self.answers = {}
        if not gates:
            return None
        if self.parent is not None:
            raise PauseSignal([], records=gates)  # pauses the parent's task
        return self._paused_result(gates)

    def _after_gates(self, new: CheckpointRecord, gated: list[TaskSpec]) -> list[PauseRecord]:
        """The ``after`` pauses of a committed step's gated tasks, raised at ``new``."""
        root = self._root().checkpoint if self.parent is not None else None
        created = now()
        return [
            PauseRecord(
                PauseId(self.pause_id(spec.id, "after")),
                self.thread_id,
                self.ns,
                # The thread's checkpoint: the new one, or the root's for a subgraph's pause.
                (root or new).id,
                spec.id,
                self._node_path(spec.node),
                "after",
                {"node": spec.node},
                created,
            )
            for spec in gated
        ]

    def _step_updates(self, ordered: list[Outcome]) -> list[dict[str, Any]]:
        """A step's ``updates`` events: ``{node: update}`` for every node that ran; a node
        that ran as several tasks (``Send`` fan-out) has each further task's update in a
        further event of the step, in task order, so no update is lost."""
        events: list[dict[str, Any]] = []
        for o in ordered:
            path = self._node_path(o.spec.node)
            for data in events:
                if path not in data:
                    break
            else:
                data = {}
                events.append(data)
            data[path] = self._as_update(o.writes)
        return events

    def _collect_out(
        self,
        out: list[list[Any]],
        version: int,
        versions: dict[str, int],
        bases: dict[str, tuple[int, int]],
        writes: list[ChannelWrite],
    ) -> None:
        """Append a step's writes to parent keys to the hidden output channel, stored as an
        append chain like a list channel (its size grows with what the step wrote)."""
        key = plan.OUT_KEY
        self.hidden[key] = [*self.hidden.get(key, []), *out]
        chain = bases.get(key) or ((versions[key], 0) if key in versions else None)
        if chain is not None and chain[1] + 1 < COMPACT_EVERY:
            writes.append(ChannelWrite(key, version, "append", out, chain[0]))
            bases[key] = (chain[0], chain[1] + 1)
        else:
            writes.append(set_write(key, version, self.hidden[key]))
            bases.pop(key, None)
        versions[key] = version

    async def _route_from(self, node: str, o: Outcome | None) -> list[str | Send]:
        edges = self.graph.edges
        targets: list[str | Send] = list(edges.static.get(node, ()))
        branches = edges.branches.get(node)
        if branches:
            view = self.graph.schema.view(self.values)
            for br in branches:
                res = br.router(view)
                if inspect.isawaitable(res):
                    res = await res
                targets += plan.normalize_targets(
                    res, self.graph.nodes, f"conditional edge from {node!r}", br.path_map
                )
        return targets
