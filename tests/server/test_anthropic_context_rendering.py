"""anthropic_context.manage hands back the rendering its count made of the messages it ends with, so the route
renders the prompt once: the first count's when no edit applies, the last applied edit's otherwise (an edit
that frees too little keeps the rendering before it)."""

from __future__ import annotations

import asyncio

from hinfer.server import anthropic_context as ac
from hinfer.server.schemas_anthropic import Message


def turns(n: int) -> list[Message]:
    out = [Message(role="user", content="look")]
    for i in range(n):
        out.append(Message(role="assistant", content=[{"type": "tool_use", "id": f"t{i}", "name": "read",
                                                       "input": {}}]))
        out.append(Message(role="user", content=[{"type": "tool_result", "tool_use_id": f"t{i}",
                                                  "content": "x " * 50}]))
    return out


def manage(messages: list[Message], edits: list[dict]) -> tuple[ac.Managed[str], list[str]]:
    renders: list[str] = []

    async def count(msgs: list[Message]) -> tuple[int, str]:
        text = repr([m.content for m in msgs])
        renders.append(text)
        return len(text), text

    return asyncio.run(ac.manage(messages, {"edits": edits}, count)), renders


def test_no_edit_applied_keeps_the_first_rendering():
    managed, renders = manage(turns(2), [{"type": ac.CLEAR_TOOL_USES}])  # under the default trigger
    assert renders == [managed.rendered] and managed.rendered == repr([m.content for m in managed.messages])


def test_an_applied_edit_hands_back_its_rendering():
    edit = {"type": ac.CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 1},
            "keep": {"type": "tool_uses", "value": 1}}
    managed, renders = manage(turns(3), [edit])
    assert len(renders) == 2 and managed.applied and managed.rendered == renders[-1]
    assert managed.rendered == repr([m.content for m in managed.messages])


def test_an_edit_that_frees_too_little_keeps_the_rendering_before_it():
    edit = {"type": ac.CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 1},
            "keep": {"type": "tool_uses", "value": 1}, "clear_at_least": {"type": "input_tokens", "value": 10**6}}
    managed, renders = manage(turns(3), [edit])
    assert len(renders) == 2 and managed.applied == [] and managed.rendered == renders[0]


def test_without_context_management_nothing_is_counted():
    async def count(msgs: list[Message]) -> tuple[int, str]:
        raise AssertionError("counted")

    managed = asyncio.run(ac.manage(turns(1), None, count))
    assert managed.rendered is None and managed.original_tokens is None
