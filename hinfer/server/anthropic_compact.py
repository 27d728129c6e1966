"""Anthropic's server-side compaction (`compact_20260112`): when a request's prompt passes the edit's trigger, the
model first writes a summary of the conversation (thinking off, tools hidden, the Responses compaction's prompt
and the edit's `instructions`), which comes back as a `compaction` block; the answer is then generated from the
summary alone, the context a later request that replays the block has (anthropic_context.replay_compaction). With
`pause_after_compaction` the response stops after the block (`stop_reason: "compaction"`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request

from hinfer.server import compaction
from hinfer.server.anthropic_convert import chat_prompt, sampling_params
from hinfer.server.anthropic_responses import message_object, run_usage
from hinfer.server.generation import EngineRun, run_to_end
from hinfer.server.ids import new_id
from hinfer.server.images import reads_images, with_images
from hinfer.server.prompt import plan_max_tokens, render_prompt_off_loop
from hinfer.server.schemas_anthropic import Message, MessagesRequest, ToolChoice
from hinfer.server.state import ServerState


@dataclass
class Compacted:
    summary: str
    usage: dict[str, Any]  # the summary's iteration, as `usage.iterations` lists it
    timings: dict[str, Any]  # the summary run's (EngineRun.timings)

    def block(self) -> dict[str, Any]:
        return {"type": "compaction", "content": self.summary}

    def messages(self) -> list[Message]:
        """The conversation the answer is generated from."""
        return [Message(role="user", content=compaction.SUMMARY_HEAD + self.summary)]


async def summarize(st: ServerState, body: MessagesRequest, messages: list[Message], edit: dict[str, Any],
                    http: Request) -> Compacted:  # fmt: skip
    """The conversation `messages` summarized by the model, run to its end."""
    ask = compaction.PROMPT
    if isinstance(edit.get("instructions"), str) and edit["instructions"].strip():
        ask += "\n\n" + edit["instructions"].strip()
    req = body.model_copy(update={"messages": [*messages, Message(role="user", content=ask)],
                                  "tool_choice": ToolChoice(type="none"), "thinking": None,
                                  "output_config": None, "stop_sequences": None})  # fmt: skip
    prompt, _ = chat_prompt(req, st.preserve_thinking_default, reads_images(st))
    ids = await render_prompt_off_loop(st.tokenizer, prompt, st.prompt_guard)
    ids, images = await with_images(st, prompt, ids)
    room = plan_max_tokens(len(ids), None, st.engine.max_context)
    sp = sampling_params(req, min(room, st.compaction_max_tokens), st.tokenizer.vocab_size,
                         st.engine.sampling_defaults)
    run = EngineRun(st, new_id("msgcmp-"), ids, sp, http, images)
    await run.start()
    text: list[str] = []
    await run_to_end(run, lambda ev: text.append(ev.text))
    usage = {"type": "compaction", **run_usage(run)}
    summary = "".join(text).strip()
    if run.final is not None and run.final.finish_reason == "length":
        summary = compaction.cut_note(summary, run.output_tokens)
    return Compacted(summary, usage, run.timings())


def paused_events(c: Compacted, model: str, context_management: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A response that stops after the compaction block (`pause_after_compaction`), as stream events."""
    counts = {k: v for k, v in c.usage.items() if k != "type"}
    usage = counts | {"iterations": [c.usage]}
    start = message_object(new_id("msg_"), model, [], None, None, counts | {"output_tokens": 0})
    delta: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": "compaction", "stop_sequence": None},
                             "usage": usage, "timings": c.timings}
    if context_management is not None:
        delta["context_management"] = context_management
    return [{"type": "message_start", "message": start}, *block_events(c, 0), delta, {"type": "message_stop"}]


def block_events(c: Compacted, index: int) -> list[dict[str, Any]]:
    """The compaction block as stream events: its summary in one `compaction_delta`."""
    return [{"type": "content_block_start", "index": index, "content_block": {"type": "compaction", "content": None}},
            {"type": "content_block_delta", "index": index, "delta": {"type": "compaction_delta",
                                                                      "content": c.summary}},
            {"type": "content_block_stop", "index": index}]
