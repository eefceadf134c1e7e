"""The conformance suite every ``Checkpointer`` backend must pass (STYLE.md #9).

Each ``check_*`` coroutine takes a factory; every call of the factory returns a checkpointer
on a new, empty store. The checks use only the ``Checkpointer`` protocol, so they say what
every backend promises (``checkpoints.base``); ``MemoryCheckpointer`` is the reference.
They need ``pytest`` and ``anyio``. A backend runs them all like this::

    import pytest
    from checkpoints.testing import CHECKS, Check, Factory

    @pytest.mark.anyio
    @pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
    async def test_conformance(check: Check, tmp_path) -> None:
        await check(lambda: MyCheckpointer(...))  # a new, empty store per call

One module per section of the protocol: ``leases`` (threads and leases), ``commits``
(the commit and which error wins), ``reads`` (checkpoints, channels, tasks, memos),
``listing`` (listing, paging and counting threads), ``records`` (pauses, answers,
decisions, dispatches), ``runnable`` (the runnable index of workers), ``freezing`` (a frozen
thread's fencing); ``support`` holds what they share.
"""

from __future__ import annotations

from checkpoints.testing import commits, freezing, leases, listing, reads, records, runnable
from checkpoints.testing.support import Check, Factory

__all__ = [
    "CHECKS", "Check", "Factory", "commits", "freezing", "leases", "listing", "reads",
    "records", "runnable",
]  # fmt: skip

CHECKS: list[Check] = [
    leases.check_lease_acquire_renew_release,
    leases.check_lease_held_by_live_owner,
    leases.check_lease_taken_by_one_of_many_os_threads,
    leases.check_lease_takeover_after_expiry,
    leases.check_lease_takeover_of_dead_process,
    commits.check_commit_fencing,
    commits.check_commit_taking_the_lease_expects_the_status_it_read,
    commits.check_commit_writes_everything,
    commits.check_serialization_error_writes_nothing,
    commits.check_commit_does_not_alias_batch,
    commits.check_which_error_wins,
    reads.check_checkpoints_get_and_list,
    reads.check_channels_set_and_append_chains,
    reads.check_channel_chunks,
    reads.check_tasks_upsert_and_load,
    reads.check_memos,
    records.check_pauses_and_answers,
    records.check_decisions_append_only,
    records.check_decision_pause_id_and_extra,
    records.check_dispatch_claim_once,
    listing.check_list_threads,
    listing.check_list_threads_refuses_an_unknown_status,
    listing.check_pages_concatenate_to_the_listing,
    listing.check_paging_while_threads_change,
    listing.check_count_threads,
    listing.check_listing_refuses_bad_arguments,
    leases.check_commit_takes_and_gives_up_the_lease,
    leases.check_resume_thread,
    *runnable.CHECKS,
    *freezing.CHECKS,
]
"""Every check, in a stable order (test ids are the function names)."""
