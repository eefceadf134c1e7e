"""Building blocks for the attacks on tool authorization (``test_authorization_attacks``).

The flow and the tools are ``_auth_flow``'s; this module adds a low-risk trusted tool, a
spy that can kill its own process with SIGKILL right after it recorded a refund (the
dispatch claim is committed, its outcome never is), and a script entry point:
``python _attack_flow.py DB SPY ACTION [JSON]`` builds ``_auth_flow``'s graph on the SQLite
file ``DB`` and prints one JSON outcome. With ``"crash": true`` in the JSON, a refund that
starts kills its process; with ``"hold": PATH`` it waits, once started, until ``PATH``
exists.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from graphflow.agents import tool
from graphflow.agents.tools import Tool
from graphflow.auth import Decision

if __package__:
    from . import _auth_flow as flow
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).parent))
    import _auth_flow as flow  # type: ignore[import-not-found, no-redef]

THREAD = "t1"
TIMEOUT = 60.0


class CrashSpy(flow.Spy):
    """A ``Spy`` that, once it recorded a refund, kills its process (SIGKILL) when asked
    to ``crash``, or waits until the file ``hold`` exists (the refund is in flight)."""

    def __init__(
        self, path: str | os.PathLike[str], *, crash: bool = False, hold: str | None = None
    ):
        super().__init__(path)
        self.crash = crash
        self.hold = Path(hold) if hold else None

    def __call__(self, name: str, **args: Any) -> None:
        super().__call__(name, **args)
        if name != "issue_refund":
            return
        if self.crash:
            os.kill(os.getpid(), signal.SIGKILL)
        deadline = time.monotonic() + TIMEOUT
        while self.hold is not None and not self.hold.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.hold} never appeared")
            time.sleep(0.01)


def lookup_tool(spy: flow.Spy) -> Tool:
    """``lookup(q)``: low risk, trusted output; records every run."""

    @tool(risk="low")
    def lookup(q: str) -> str:
        """Look something up in the knowledge base."""
        spy("lookup", q=q)
        return f"found {q}"

    return lookup


def main() -> None:
    from checkpoints import SqliteCheckpointer

    db, spy_path, action = sys.argv[1:4]
    extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    spy = CrashSpy(spy_path, crash=bool(extra.get("crash")), hold=extra.get("hold"))
    g = flow.build(SqliteCheckpointer(db), spy, tools=flow.make_tools(spy))
    try:
        if action == "start":
            res = g.invoke(
                flow.ask(extra["text"]), thread_id=THREAD, principal=extra.get("principal")
            )
        else:
            decisions = {k: Decision.coerce(v) for k, v in extra.get("decisions", {}).items()}
            res = g.invoke(None, thread_id=THREAD, decisions=decisions)
        out: dict[str, Any] = {"status": res.status, "pauses": [p.id for p in res.pauses]}
    except Exception as e:  # reported to the parent, which decides what is expected
        out = {"error": type(e).__name__, "message": str(e)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
