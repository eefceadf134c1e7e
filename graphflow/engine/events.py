"""``Emitter``: a run's stream events (API.md, "Events"), sent from any thread of the run."""

from __future__ import annotations

import threading
from typing import Any

import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectSendStream

from graphflow.types import Event, EventType, StreamMode


class Emitter:
    """Sends a run's events to the stream of ``stream``/``astream``; without a stream it
    only answers that nothing is wanted (``invoke`` builds no event).

    Events come from the event loop's thread, or from a worker thread running a sync node
    of a parallel step (``ctx.emit``), which hands them to the loop.
    """

    def __init__(
        self, sink: MemoryObjectSendStream[Event] | None, mode: StreamMode, thread_id: str
    ):
        self.sink = sink
        self.mode: StreamMode = mode
        self.thread_id = thread_id
        self.debug = sink is not None and mode == "debug"
        """Whether task, checkpoint and custom events are wanted."""
        self.updates = sink is not None and mode in ("updates", "debug")
        self.values = sink is not None and mode == "values"
        self._loop_thread = threading.get_ident()
        self.token = anyio.lowlevel.current_token() if sink is not None else None

    @property
    def reader_gone(self) -> bool:
        """Whether the stream's reader stopped reading (a ``break``, a Ctrl-C): the run stops
        after the step it committed (``StreamClosed``)."""
        return self.sink is not None and self.sink.statistics().open_receive_streams == 0

    def emit(self, type_: EventType, node: str | None, step: int | None, data: Any) -> None:
        """Send one event (nothing without a stream, or once its reader is gone)."""
        if self.sink is None or self.reader_gone:
            return
        event = Event(type_, node, step, data, self.thread_id)
        if threading.get_ident() == self._loop_thread:
            self._send(event)
        else:
            anyio.from_thread.run_sync(self._send, event, token=self.token)

    def _send(self, event: Event) -> None:
        """On the loop's thread: looked at again there (the reader may have gone since)."""
        if self.sink is not None and not self.reader_gone:
            self.sink.send_nowait(event)
