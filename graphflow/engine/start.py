"""How a run starts: from a new input, from a fork of an older checkpoint, or from answers.

``RunStart`` is the part of a run (``engine.loop.Run``) that makes its first checkpoint or
takes the answers a resume brings; the run then executes supersteps from there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from checkpoints.errors import CorruptCheckpointError
from checkpoints.models import (
    AnswerRecord,
    CheckpointRecord,
    DecisionRecord,
    PauseId,
    PauseRecord,
    TaskRecord,
    TaskSpec,
    ThreadId,
    ThreadRecord,
    new_checkpoint_id,
    next_version,
    now,
)
from graphflow.engine import answers, plan
from graphflow.engine.apply import apply_writes, set_write
from graphflow.engine.pauses import UNSET, pause_from_record, principal_name, task_of
from graphflow.errors import NothingToResumeError
from graphflow.types import START, RunResult, Send

if TYPE_CHECKING:
    from checkpoints import Checkpointer
    from graphflow.compiled import CompiledGraph
    from graphflow.engine.tasks import Outcome


class RunStart:
    """Starting points of a ``Run`` (which provides the attributes declared here)."""

    graph: CompiledGraph
    store: Checkpointer | None
    thread_id: ThreadId
    ns: str
    thread: ThreadRecord | None
    values: dict[str, Any]
    hidden: dict[str, Any]
    checkpoint: CheckpointRecord | None
    known_pauses: dict[PauseId, PauseRecord]
    answers: dict[str, Any]
    principal: Any
    decisions: Mapping[str, Any]
    ignored: tuple[DecisionRecord, ...]
    _pending_answers: list[AnswerRecord]
    _pre_pauses: list[PauseRecord] | None
    _pre_answers: dict[PauseId, AnswerRecord] | None

    def _emit(self, type_: str, node: str | None, step: int | None, data: Any) -> None:
        raise NotImplementedError

    def _root(self) -> RunStart:
        raise NotImplementedError

    async def _route_from(self, node: str, o: Outcome | None) -> list[str | Send]:
        raise NotImplementedError

    async def _commit_checkpoint(
        self,
        ck: CheckpointRecord,
        writes: list[Any],
        frontier: Sequence[TaskSpec],
        tasks: list[TaskRecord] | None = None,
        *,
        durable: bool = True,
    ) -> None:
        raise NotImplementedError

    # -- a new input or a fork --------------------------------------------------------------------
    async def _start_input(self, input: Any, head: CheckpointRecord | None, forking: bool) -> None:
        schema = self.graph.schema
        update = schema.input_update(input)
        version = next_version()
        if head is None:
            base_values = schema.initial()
            applied = apply_writes(
                schema, base_values, {}, {}, [("input", update.items())], version
            )
            stored = {w.channel for w in applied.writes}
            for k in sorted(set(applied.values) - stored):
                applied.versions[k] = version
            writes = [
                *applied.writes,
                *(
                    set_write(k, version, applied.values[k])
                    for k in sorted(set(applied.values) - stored)
                ),
            ]
        else:
            applied = apply_writes(
                schema,
                self.values,
                head.channel_versions,
                head.channel_bases,
                [("input", update.items())],
                version,
                force_set=forking,
            )
            writes = applied.writes
            if forking:
                written = {w.channel for w in writes}
                writes += self._materialize(applied.values, version, applied.versions, written)
                applied.bases = {}
            # A new run starts clean: join barriers of an earlier run are reset.
            for k in self.hidden:
                applied.versions.pop(k, None)
            self.hidden = {}
        self.values = {k: v for k, v in applied.values.items() if not plan.is_hidden(k)}
        ck_id = new_checkpoint_id()
        targets = await self._route_from(START, None)
        frontier = plan.make_frontier(ck_id, self.ns, targets)
        ck = CheckpointRecord(
            ck_id,
            self.thread_id,
            self.ns,
            head.id if head else None,
            head.step + 1 if head else -1,
            "input",
            applied.versions,
            frontier,
            {},
            now(),
            applied.bases,
        )
        # Made before any node runs: nothing durable depends on it until the step's commit,
        # which makes it durable too (commits stay in order), so it need not wait for an fsync.
        await self._commit_checkpoint(ck, writes, frontier, durable=bool(not frontier))

    def _materialize(
        self,
        values: Mapping[str, Any],
        version: int,
        versions: dict[str, int],
        written: Collection[str] = (),
    ) -> list[Any]:
        """Rewrite the list channels of a fork as whole values: the fork starts its own chains.

        A list channel is stored as a ``set`` row followed by a chain of ``append`` rows; a
        branch that extended the chain of a row the fork shares (a list stored whole counts
        too: the older branch may have appended to it) would interleave its appends with the
        fork's, and neither branch could be read again. ``written`` are channels this commit
        already stores whole.
        """
        out = []
        for k in sorted(values):
            if k in versions and k not in written and isinstance(values[k], list):
                out.append(set_write(k, version, values[k]))
                versions[k] = version
        return out

    async def _fork(self, src: CheckpointRecord) -> None:
        """Make a copy of an older checkpoint the new head, with fresh task ids."""
        version = next_version()
        versions = dict(src.channel_versions)
        merged = {**self.values, **self.hidden}
        writes = self._materialize(merged, version, versions)
        ck_id = new_checkpoint_id()
        frontier = tuple(
            TaskSpec(plan.task_id(ck_id, self.ns, t.node, i), t.node, t.has_arg, t.arg)
            for i, t in enumerate(src.frontier)
        )
        ck = CheckpointRecord(
            ck_id,
            self.thread_id,
            self.ns,
            src.id,
            src.step,
            "fork",
            versions,
            frontier,
            {"forked_from": src.id},
            now(),
            {},
        )
        await self._commit_checkpoint(ck, writes, frontier)

    # -- answers ------------------------------------------------------------------------------
    async def _take_answers(self, resume: Any) -> RunResult | None:
        """Take the answers given to this call; return a result when nothing can proceed."""
        assert self.store is not None and self.thread is not None
        pending_ids = list(self.thread.pending_pause_ids)
        if not pending_ids:
            if resume is not UNSET or self.decisions:
                raise NothingToResumeError(self.thread_id)
            return None
        if self._pre_pauses is not None:
            records, self._pre_pauses = self._pre_pauses, None
        else:
            ids = [PauseId(p) for p in pending_ids]
            records = await self.store.get_pauses(self.thread_id, ids)
        missing = sorted(set(pending_ids) - {p.id for p in records})
        if missing:
            raise CorruptCheckpointError(
                f"thread {self.thread_id!r}: pending pause records {missing} are missing",
                thread_id=self.thread_id,
                checkpoint_id=self.thread.head,
            )
        pending = {p.id: p for p in records}
        self.known_pauses = dict(pending)
        found = answers.resolve(
            self.thread_id,
            records,
            resume=resume,
            decisions=self.decisions,
            by=principal_name(self.principal),
            release_gates=True,
        )
        self.ignored = found.ignored
        if found.decisions:
            await self.store.put_decisions(found.decisions)
        # The answers are written with the run's first commit (one fsync fewer): until then
        # nothing of the resumed step is durable, and a crash loses the call, not the thread.
        self._pending_answers = list(found.answers)
        stored = await self._load_answers()
        if not any(p in stored for p in pending_ids):
            return self._paused_result([pending[p] for p in pending_ids if p in pending])
        return None

    async def _load_answers(self) -> set[str]:
        """Load answers to pauses of the head's tasks (earlier pauses of a rerun node
        included); return the ids of every answered pause of the thread (nested ones too)."""
        assert self.store is not None and self.checkpoint is not None
        tasks = {t.id for t in self.checkpoint.frontier}
        if self._pre_answers is not None:
            found, self._pre_answers = self._pre_answers, None
        else:
            found = await self.store.load_answers(self.thread_id)
        stored = {k: a.value for k, a in found.items()}
        root = self._root()
        stored.update((a.pause_id, a.value) for a in root._pending_answers)  # not yet written
        self.answers = {k: v for k, v in stored.items() if task_of(k) in tasks}
        return set(stored)

    def _paused_result(self, pauses: Sequence[PauseRecord]) -> RunResult:
        public = [pause_from_record(p) for p in pauses]
        for p in public:
            self._emit("pause", p.node, self.checkpoint.step + 1 if self.checkpoint else None, p)
        ck_id = self.checkpoint.id if self.checkpoint else None
        self._emit("paused", None, None, public)
        return RunResult(
            "paused",
            self.graph.schema.view(self.values),
            public,
            self.thread_id,
            ck_id,
            self._root().ignored,
        )
