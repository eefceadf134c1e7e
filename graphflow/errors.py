"""Errors raised by graphflow.

The tree (storage errors come from ``checkpoints`` and keep their own root)::

    GraphflowError
    ├── GraphValidationError       compile() found the graph invalid (names the nodes)
    ├── InvalidUpdateError         a node or input wrote an unknown key or a bad value
    ├── InvalidRouteError          a router or Command sent the run to an unknown node
    ├── InvalidArgumentError       a call's arguments are inconsistent (also a ValueError)
    ├── ThreadNotFoundError        no such thread in the checkpointer (also a LookupError)
    ├── ThreadPausedError          new input for a thread that waits for answers
    ├── ThreadCancelledError       the thread was cancelled
    ├── ThreadFinishedError        cancel() of a thread that is done
    ├── ThreadFrozenError          the thread is frozen until it is unfrozen
    ├── ThreadBusyError            another runner holds the thread
    ├── NothingToResumeError       resume/decisions for a thread with no pending pause
    ├── UnknownPauseError          resume names a pause id that is not pending
    ├── AmbiguousResumeError       a bare resume value while several pauses are pending
    ├── RecursionLimitError        the run took more supersteps than recursion_limit
    └── NodeError                  a node raised; the original is ``__cause__``
"""

from __future__ import annotations

from collections.abc import Sequence


class GraphflowError(Exception):
    """Root of every error graphflow raises (storage errors derive from CheckpointError)."""


class GraphValidationError(GraphflowError):
    """The graph is invalid; raised by ``compile()``. ``nodes`` lists the nodes involved."""

    def __init__(self, message: str, nodes: Sequence[str] = ()):
        super().__init__(message)
        self.nodes = tuple(nodes)


class InvalidUpdateError(GraphflowError):
    """A node (or the input) wrote a key the state does not have, or returned a bad value."""

    def __init__(self, message: str, *, node: str | None = None, key: str | None = None):
        super().__init__(message)
        self.node = node
        self.key = key


class InvalidRouteError(GraphflowError):
    """A conditional edge or ``Command.goto`` named a node that does not exist."""


class InvalidArgumentError(GraphflowError, ValueError):
    """The arguments of a call do not fit together (for example no ``thread_id``)."""


class ThreadNotFoundError(GraphflowError, LookupError):
    """The checkpointer has no thread with this id."""

    def __init__(self, thread_id: str):
        super().__init__(
            f"no thread {thread_id!r} in the checkpointer; start it with a non-None input"
        )
        self.thread_id = thread_id


class ThreadPausedError(GraphflowError):
    """New input was given for a paused thread: answer its pauses or cancel it first."""

    def __init__(self, thread_id: str, pause_ids: Sequence[str]):
        super().__init__(
            f"thread {thread_id!r} is paused at {list(pause_ids)}; answer with "
            f"invoke(None, thread_id=..., resume=... or decisions=...) or cancel it with "
            "graph.cancel(thread_id, reason=...)"
        )
        self.thread_id = thread_id
        self.pause_ids = tuple(pause_ids)


class ThreadCancelledError(GraphflowError):
    """The thread was cancelled; it can only take a new input."""

    def __init__(self, thread_id: str):
        super().__init__(f"thread {thread_id!r} was cancelled; start a new run with an input")
        self.thread_id = thread_id


class ThreadBusyError(GraphflowError):
    """Another runner, in this or another process, is running the thread."""

    def __init__(self, thread_id: str, owner: str | None = None, *, answering: bool = False):
        who = f" ({owner})" if owner else ""
        if answering:
            then = (
                "it may be applying answers to the same pauses: when it has finished, look at "
                "graph.pending_pauses(thread_id) before answering again"
            )
        else:
            then = "try again when it has finished"
        super().__init__(f"thread {thread_id!r} is being run by another runner{who}; {then}")
        self.thread_id = thread_id
        self.owner = owner


class NothingToResumeError(GraphflowError):
    """``resume=`` or ``decisions=`` was given for a thread with no pending pause."""

    def __init__(self, thread_id: str):
        super().__init__(f"thread {thread_id!r} has no pending pause to resume")
        self.thread_id = thread_id


class UnknownPauseError(GraphflowError, LookupError):
    """``resume=`` named pause ids that are not pending in the thread."""

    def __init__(
        self,
        thread_id: str,
        unknown: Sequence[str],
        pending: Sequence[str],
        *,
        hint: str | None = None,
    ):
        extra = f"; {hint}" if hint else ""
        super().__init__(
            f"thread {thread_id!r} has no pending pause {sorted(unknown)}; pending: "
            f"{sorted(pending)}{extra}"
        )
        self.thread_id = thread_id
        self.unknown = tuple(unknown)


class AmbiguousResumeError(GraphflowError):
    """A bare ``resume`` value was given while several pauses are pending."""

    def __init__(self, thread_id: str, pause_ids: Sequence[str]):
        super().__init__(
            f"thread {thread_id!r} has {len(pause_ids)} pending pauses {sorted(pause_ids)}; "
            "pass resume={pause_id: value, ...}"
        )
        self.thread_id = thread_id
        self.pause_ids = tuple(pause_ids)


class ThreadFrozenError(GraphflowError):
    """The thread is frozen (by an operator, or a policy's ``freeze``): nothing runs and no
    decision applies until ``graph.unfreeze(thread_id, by=..., reason=...)``."""

    def __init__(self, thread_id: str, reason: str | None = None):
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"thread {thread_id!r} is frozen{why}: nothing runs and no decision applies until "
            "graph.unfreeze(thread_id, by=..., reason=...)"
        )
        self.thread_id = thread_id
        self.reason = reason


class ThreadFinishedError(GraphflowError):
    """The thread is done, so there is nothing to cancel (a new input starts a new run)."""

    def __init__(self, thread_id: str):
        super().__init__(
            f"thread {thread_id!r} is done: there is nothing to cancel; a new input starts a "
            "new run on it"
        )
        self.thread_id = thread_id


class GraphMismatchError(GraphflowError):
    """A stored thread waits on nodes this graph does not have: another graph made it (or
    an earlier version of this one, with nodes since renamed). Nothing ran; the thread is as
    it was."""

    def __init__(
        self,
        thread_id: str,
        nodes: Sequence[str],
        *,
        thread_graph: str | None = None,
        graph: str | None = None,
    ):
        self.thread_id = thread_id
        self.nodes = tuple(nodes)
        self.thread_graph, self.graph = thread_graph, graph
        names = ", ".join(repr(n) for n in self.nodes)
        this = f"this graph ({graph!r})" if graph is not None else "this graph (unnamed)"
        if thread_graph is not None and not self.nodes:
            super().__init__(
                f"thread {thread_id!r} is of graph {thread_graph!r}, not of {this}: resume it "
                f"with graph {thread_graph!r} (workers match threads by this name)"
            )
            return
        if thread_graph is not None:
            super().__init__(
                f"thread {thread_id!r} is of graph {thread_graph!r} and waits on node {names}, "
                f"which {this} does not have: resume it with graph {thread_graph!r}"
            )
            return
        super().__init__(
            f"thread {thread_id!r} waits on node {names}, which this graph does not have: "
            "another graph made it; resume it with that graph (give graphs names, "
            "compile(name=...), so that workers tell their threads apart)"
        )


class RecursionLimitError(GraphflowError):
    """The run exceeded ``recursion_limit`` supersteps; its last checkpoint is kept."""


class NodeExitError(RuntimeError):
    """A node called ``sys.exit()`` (raised ``SystemExit``), or raised a
    ``KeyboardInterrupt`` that is not the user's Ctrl-C (see ``node_exit``): that fails its
    task, as any other exception would (``NodeError``), and never ends the process running
    the graph (a worker goes on with its other threads)."""

    def __init__(self, code: object, *, raised: str | None = None):
        what = raised if raised is not None else f"called sys.exit({code!r})"
        super().__init__(f"the node {what}; it failed, the process goes on")
        self.code = code


def node_exit(error: BaseException, *, on_thread: bool) -> NodeExitError | None:
    """The task failure for a ``SystemExit`` or ``KeyboardInterrupt`` that node code raised
    (``on_thread``: in a worker thread); None for what is the user's Ctrl-C, which goes on
    to stop the program: a ``KeyboardInterrupt`` on the main thread while SIGINT has
    Python's default handler. Ctrl-C never reaches another thread, and a process that
    handles SIGINT itself (``Worker.run_forever``) gets no ``KeyboardInterrupt`` from it."""
    if isinstance(error, SystemExit):
        return NodeExitError(error.code)
    import signal
    import threading

    main = not on_thread and threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        return None
    return NodeExitError(None, raised="raised KeyboardInterrupt")


class NodeError(GraphflowError):
    """A node raised an exception; the original is kept as ``__cause__``."""

    def __init__(
        self,
        node: str,
        error: BaseException,
        *,
        thread_id: str | None = None,
        router: bool = False,
    ):
        """``router``: the exception came from the router of a conditional edge from
        ``node`` (``node`` reruns with it: its writes were not applied)."""
        if thread_id:  # a thread of a checkpointer: its completed work is kept
            then = (
                f" in thread {thread_id!r}; fix the cause and run invoke(None, "
                f"thread_id={thread_id!r}) to retry it alone"
            )
        else:
            then = "; fix the cause and run the graph again"
        who = f"node {node!r}"
        if router:
            who = "the router of the conditional edge from " + (
                "START" if node == "__start__" else repr(node)
            )
        super().__init__(f"{who} raised {type(error).__name__}: {error}{then}")
        self.node = node
        self.error = error
        self.thread_id = thread_id
