"""A process appending to one evidence log: ``python _append_worker.py PATH NAME N``.

It opens the log, prints ``ready``, waits for a line on stdin (the barrier: every worker is
released at once), appends N proposals of thread NAME, and prints ``done``.
"""

from __future__ import annotations

import sys

from graphflow.evidence import CallFacts, EvidenceLog, stages


def main() -> None:
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log = EvidenceLog(path)
    drafts = [
        stages.proposed(
            CallFacts(
                thread_id=name,
                call_id=f"{name}-{i}",
                tool="send_email",
                args={"to": "x@example.com", "n": i},
                agent="mailer",
            )
        )
        for i in range(count)
    ]
    print("ready", flush=True)
    sys.stdin.readline()
    for draft in drafts:
        log.append(draft)
    log.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
