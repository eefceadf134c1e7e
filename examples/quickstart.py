"""A graph that pauses for a human and is resumed by thread id (README, "A graph that pauses").

    python examples/quickstart.py

Each run uses a new thread of ``quickstart.db`` (in the current directory), so running it
twice prints the same lines.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BaseModel

from checkpoints import SqliteCheckpointer
from graphflow import END, START, StateGraph, interrupt
from graphflow.reducers import append


class State(BaseModel):
    log: Annotated[list[str], append] = []


def draft(state: State) -> dict[str, list[str]]:
    return {"log": ["drafted"]}


def review(state: State) -> dict[str, list[str]]:
    answer = interrupt({"question": "publish?"})  # pauses; returns the answer on resume
    return {"log": [f"review: {answer}"]}


def main() -> None:
    builder = StateGraph(State)
    builder.add_node(draft).add_node(review)
    builder.add_edge(START, "draft").add_edge("draft", "review").add_edge("review", END)
    graph = builder.compile(checkpointer=SqliteCheckpointer("quickstart.db"))

    thread = f"t-{uuid.uuid4().hex[:8]}"
    result = graph.invoke({}, thread_id=thread)
    print(result.status, [p.value for p in result.pauses])  # paused [{'question': 'publish?'}]
    result = graph.invoke(None, thread_id=thread, resume="yes")
    print(result.status, result.state.log)  # done ['drafted', 'review: yes']


if __name__ == "__main__":
    main()
