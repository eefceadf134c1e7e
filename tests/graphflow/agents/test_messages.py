"""Messages, tool calls, model responses and the add_messages reducer."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from checkpoints import serde
from graphflow import reducers
from graphflow.agents.messages import (
    Message,
    MessagesState,
    ModelResponse,
    ToolCall,
    add_messages,
    coerce_message,
)
from graphflow.state import StateSchema


def test_message_defaults_and_new_ids() -> None:
    a, b = Message(role="user"), Message(role="user")
    assert (a.content, a.tool_calls, a.tool_call_id, a.name) == ("", [], None, None)
    assert len(a.id) == 32 and a.id != b.id
    with pytest.raises(ValidationError):
        Message(role="robot")  # type: ignore[arg-type]


def test_to_message_is_an_assistant_message_with_the_given_id() -> None:
    call = ToolCall(id="call_1", name="delete_file", args={"path": "/tmp/x"})
    msg = ModelResponse(text="deleting", tool_calls=[call], usage={"total_tokens": 3}).to_message(
        "t0"
    )
    assert msg == Message(id="t0", role="assistant", content="deleting", tool_calls=[call])


def test_coerce_message() -> None:
    msg = Message(role="system", content="be brief")
    assert coerce_message(msg) is msg
    from_str = coerce_message("hi")
    assert (from_str.role, from_str.content) == ("user", "hi")
    from_dict = coerce_message({"role": "assistant", "content": "ok"})
    assert (from_dict.role, from_dict.content, len(from_dict.id)) == ("assistant", "ok", 32)
    assert coerce_message({"id": "m1", "role": "tool", "tool_call_id": "c1"}).id == "m1"
    with pytest.raises(ValidationError):
        coerce_message({"role": "nobody"})
    with pytest.raises(TypeError, match="int"):
        coerce_message(42)


def test_add_messages_appends_keeping_the_same_items() -> None:
    current = [Message(id="a", role="user", content="one")]
    new = Message(id="b", role="assistant", content="two")
    result = add_messages(current, new)
    assert result == [*current, new]
    assert result[0] is current[0] and result[1] is new
    assert current == [Message(id="a", role="user", content="one")]  # not mutated
    assert result is not current


def test_add_messages_replaces_by_id_in_place() -> None:
    current = [
        Message(id="a", role="user", content="one"),
        Message(id="b", role="assistant", content="draft"),
        Message(id="c", role="user", content="three"),
    ]
    snapshot = list(current)
    result = add_messages(current, [{"id": "b", "role": "assistant", "content": "final"}, "four"])
    assert [m.id for m in result[:3]] == ["a", "b", "c"]
    assert result[1].content == "final"
    assert result[0] is current[0] and result[2] is current[2]
    assert (result[3].role, result[3].content) == ("user", "four")
    assert current == snapshot and current[1].content == "draft"


def test_add_messages_coerces_dicts_strings_and_tuples() -> None:
    result = add_messages(None, ({"role": "system", "content": "s"}, "hi"))
    assert [(m.role, m.content) for m in result] == [("system", "s"), ("user", "hi")]
    assert all(isinstance(m, Message) for m in result)
    assert add_messages([], "x")[0].content == "x"


def test_add_messages_same_new_id_twice_keeps_the_last() -> None:
    result = add_messages(
        [], [Message(id="x", role="user", content="1"), {"id": "x", "role": "user", "content": "2"}]
    )
    assert [(m.id, m.content) for m in result] == [("x", "2")]


def test_add_messages_rejects_other_values() -> None:
    with pytest.raises(TypeError, match="chat message"):
        add_messages([], [object()])  # type: ignore[list-item]


def test_the_reducer_is_the_same_whether_or_not_agents_is_imported() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from graphflow.reducers import add_messages; "
        "r = add_messages(None, {'role': 'user', 'content': 'hi'}); "
        "print(type(r[0]).__name__, 'graphflow.agents' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["Message", "False"], out.stderr
    assert isinstance(reducers.add_messages(None, "hi")[0], Message)


@pytest.mark.parametrize(
    "value",
    [
        ToolCall(id="c1", name="search", args={"q": "x", "n": [1, 2], "opts": {"deep": True}}),
        ModelResponse(
            text="t", tool_calls=[ToolCall(id="c1", name="f")], usage={"prompt_tokens": 5}
        ),
        ModelResponse(),
        Message(
            id="m1",
            role="assistant",
            content="calling",
            tool_calls=[ToolCall(id="c1", name="f", args={"a": 1})],
            name="bot",
        ),
        Message(role="tool", content="done", tool_call_id="c1"),
    ],
)
def test_serde_round_trip(value: Any) -> None:
    revived = serde.loads(serde.dumps(value))
    assert type(revived) is type(value)
    assert revived == value


def test_serde_names_are_stable() -> None:
    assert serde.registered_name(Message) == "graphflow.agents.Message"
    assert serde.registered_name(ToolCall) == "graphflow.agents.ToolCall"
    assert serde.registered_name(ModelResponse) == "graphflow.agents.ModelResponse"


def test_messages_state() -> None:
    state = MessagesState(messages=[{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    assert isinstance(state.messages[0], Message)
    assert MessagesState().messages == []
    schema = StateSchema(MessagesState)
    assert schema.channels["messages"].reducer is add_messages
