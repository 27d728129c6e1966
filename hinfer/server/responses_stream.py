"""Engine events -> OpenAI Responses stream events, and the final Response object they add up to.

Output items open and close as the generated pieces change kind (reasoning -> message -> function_call,
custom_tool_call or tool_search_call ...), with `output_index` counting up from 0 and one item open at a time, in
the order OpenAI streams them:
`response.output_item.added`, its content part and deltas, the `.done` events, `response.output_item.done`.
The non-streaming answer is the same builder's final object, so both modes agree. A compaction run
(compaction.py) answers with one `compaction` item instead (CompactionBuilder); after a server-side compaction
(responses_compact.py) its item leads the output, streamed first, and its run's usage joins the answer's.
"""

from __future__ import annotations

import time
from typing import Any

from hinfer.engine.protocol import TokenEvent
from hinfer.server import compaction
from hinfer.server.errors import APIError
from hinfer.server.generation import EngineRun
from hinfer.server.ids import new_id
from hinfer.server.output import OutputParser, Piece, ReasoningPiece
from hinfer.server.prompt import ChatPrompt
from hinfer.server.responses_convert import REASONING
from hinfer.server.responses_tools import TOOL_SEARCH, ToolNames, custom_input, search_arguments
from hinfer.server.schemas_responses import ResponsesRequest
from hinfer.server.structured import calls_under_grammar
from hinfer.server.tool_parser import TextPiece, ToolCallArgs, ToolCallStart

Event = dict[str, Any]


class ResponseBuilder:
    def __init__(self, run: EngineRun, body: ResponsesRequest, prompt: ChatPrompt, tools: ToolNames, *,
                 response_id: str):
        self.run = run
        self.body = body
        self.id = response_id
        self.created_at = int(time.time())
        self.parallel = prompt.tool_choice.parallel
        self.encrypted = "reasoning.encrypted_content" in (body.include or [])
        self.tools = tools  # custom tools' calls, namespace members' and the tool search's go back in their shapes
        self.parser = OutputParser(reasoning=prompt.enable_thinking, tools=prompt.parse_tools(),
                                   new_id=lambda: new_id("call_"), max_calls=prompt.max_calls,
                                   trim_strings=calls_under_grammar(run.sampling.structured))
        self.output: list[dict[str, Any]] = []
        self.reasoning_tokens = 0
        self._seq = 0
        self._open: dict[str, Any] | None = None  # the item being generated (also the last of self.output)
        self._text = ""  # the open item's text or arguments so far
        self.status = "in_progress"
        self.compaction_usage: dict[str, Any] | None = None  # a server-side compaction's run (lead_with)

    # -- events ---------------------------------------------------------------------------------------------

    def lead_with(self, item: dict[str, Any], usage: dict[str, Any]) -> None:
        """A server-side compaction's item before the generated ones (responses_compact.py), its run's `usage`."""
        self.output.append(item)
        self.compaction_usage = usage

    def start_events(self) -> list[Event]:
        out = [self._event("response.created", response=self.response()),
               self._event("response.in_progress", response=self.response())]
        for i, it in enumerate(self.output):  # the items leading the generated ones, done already
            out.append(self._event("response.output_item.added", output_index=i, item=dict(it)))
            out.append(self._event("response.output_item.done", output_index=i, item=dict(it)))
        return out

    def feed(self, ev: TokenEvent) -> list[Event]:
        if self.parser.in_reasoning:
            self.reasoning_tokens += len(ev.token_ids)
        return self._events(self.parser.feed(ev.text))

    def finish_events(self) -> list[Event]:
        out = self._events(self.parser.flush())
        final = self.run.final
        cut = final is not None and final.finish_reason == "length"
        self._close(out, "incomplete" if cut else "completed")
        self.status = "incomplete" if cut else "completed"
        out.append(self._event(f"response.{self.status}", response=self.response()))
        return out

    def failed_event(self, err: APIError) -> Event:
        self.status = "failed"
        resp = self.response()
        resp["error"] = {"code": err.code or "server_error", "message": err.message}
        return self._event("response.failed", response=resp)

    def _event(self, typ: str, **fields: Any) -> Event:
        e = {"type": typ, "sequence_number": self._seq, **fields}
        self._seq += 1
        return e

    def _events(self, pieces: list[Piece]) -> list[Event]:
        out: list[Event] = []
        for p in pieces:
            if isinstance(p, ReasoningPiece):
                if self._kind() != "reasoning":
                    self._close(out)
                    self._add(out, {"id": new_id("rs_"), "type": "reasoning", "summary": [], "content": [],
                                    "status": "in_progress"}, {"type": "reasoning_text", "text": ""})
                self._text += p.text
                out.append(self._item_event("response.reasoning_text.delta", content_index=0, delta=p.text))
            elif isinstance(p, TextPiece):
                if self._kind() != "message":
                    self._close(out)
                    self._add(out, {"id": new_id("msg_"), "type": "message", "status": "in_progress",
                                    "role": "assistant", "content": []},
                              {"type": "output_text", "text": "", "annotations": [], "logprobs": []})
                self._text += p.text
                out.append(self._item_event("response.output_text.delta", content_index=0, delta=p.text,
                                            logprobs=[]))
            elif isinstance(p, ToolCallStart):
                self._close(out)
                ns, name = self.tools.namespaced.get(p.name, (None, p.name))
                if p.name in self.tools.custom:
                    item = {"id": new_id("ctc_"), "type": "custom_tool_call", "status": "in_progress",
                            "call_id": p.id, "name": name, "input": ""}
                elif p.name == TOOL_SEARCH and self.tools.search:
                    item = {"id": new_id("tsc_"), "type": "tool_search_call", "status": "in_progress",
                            "call_id": p.id, "execution": "client", "arguments": {}}
                else:
                    item = {"id": new_id("fc_"), "type": "function_call", "status": "in_progress", "call_id": p.id,
                            "name": name, "arguments": ""}
                if ns is not None:  # a namespace member: its name and namespace apart (Codex CLI routes by both)
                    item["namespace"] = ns
                self._add(out, item, None)
            elif isinstance(p, ToolCallArgs):
                self._text += p.delta
                if self._kind() == "function_call":  # a custom call's text is sent whole when it ends, a search's
                    # arguments with its item
                    out.append(self._item_event("response.function_call_arguments.delta", delta=p.delta))
            else:  # ToolCallEnd
                self._close(out)
        return out

    def _kind(self) -> str | None:
        return self._open["type"] if self._open is not None else None

    def _item_event(self, typ: str, **fields: Any) -> Event:
        assert self._open is not None
        return self._event(typ, item_id=self._open["id"], output_index=len(self.output) - 1, **fields)

    def _add(self, out: list[Event], item: dict[str, Any], part: dict[str, Any] | None) -> None:
        self._open = item
        self._text = ""
        self.output.append(item)
        out.append(self._event("response.output_item.added", output_index=len(self.output) - 1, item=dict(item)))
        if part is not None:
            out.append(self._item_event("response.content_part.added", content_index=0, part=part))

    def _close(self, out: list[Event], status: str = "completed") -> None:
        item = self._open
        if item is None:
            return
        text = self._text
        if item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            out.append(self._item_event("response.reasoning_text.done", content_index=0, text=text))
            out.append(self._item_event("response.content_part.done", content_index=0, part=part))
            item["content"] = [part]
            if self.encrypted:
                item["encrypted_content"] = REASONING.encode(text)
        elif item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out.append(self._item_event("response.output_text.done", content_index=0, text=text, logprobs=[]))
            out.append(self._item_event("response.content_part.done", content_index=0, part=part))
            item["content"] = [part]
        elif item["type"] == "tool_search_call":  # no argument events: the item carries them when done
            item["arguments"] = search_arguments(text)
        elif item["type"] == "custom_tool_call":
            item["input"] = custom_input(text)
            out.append(self._item_event("response.custom_tool_call_input.delta", delta=item["input"]))
            out.append(self._item_event("response.custom_tool_call_input.done", input=item["input"]))
        else:
            item["arguments"] = text  # the deltas add up to the arguments' JSON object
            out.append(self._item_event("response.function_call_arguments.done", name=item["name"],
                                        arguments=text))
        item["status"] = status
        out.append(self._event("response.output_item.done", output_index=len(self.output) - 1, item=dict(item)))
        self._open = None
        self._text = ""

    # -- the Response object --------------------------------------------------------------------------------

    def usage(self) -> dict[str, Any]:
        """This run's tokens; after a server-side compaction, both runs' summed and the compaction's apart too."""
        p, c = self.run.prompt_tokens, self.run.output_tokens
        u = {"input_tokens": p, "input_tokens_details": {"cached_tokens": self.run.cached_tokens}, "output_tokens": c,
             "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens}, "total_tokens": p + c}
        if self.compaction_usage is None:
            return u
        return _summed(u, self.compaction_usage) | {"compaction": self.compaction_usage}

    def response(self) -> dict[str, Any]:
        b = self.body
        done = self.status in ("completed", "incomplete")
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": self.status,
            "background": bool(b.background), "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if self.status == "incomplete" else None,
            "instructions": b.instructions, "max_output_tokens": b.max_output_tokens, "model": b.model,
            "output": [dict(i) for i in self.output] if done else [],
            "parallel_tool_calls": self.parallel, "previous_response_id": b.previous_response_id,
            "reasoning": {"effort": b.reasoning.effort if b.reasoning else None, "summary": None},
            "store": b.store, "temperature": self.run.sampling.temperature, "top_p": self.run.sampling.top_p,
            "text": {"format": {"type": "text"}}, "tool_choice": b.tool_choice or "auto", "tools": b.tools or [],
            "truncation": "disabled", "user": b.user, "metadata": b.metadata or {},
            "conversation": {"id": b.conversation.get("id") if isinstance(b.conversation, dict) else b.conversation}
            if b.conversation else None,
            "usage": self.usage() if done else None,
            **({"timings": self.run.timings()} if done else {}),
        }


class CompactionBuilder(ResponseBuilder):
    """A compaction run's events and Response: the summary is not streamed as text; when it ends, one
    `compaction` item carries it (Codex CLI's remote compaction takes exactly one such item, nothing else)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.summary = ""
        self.replaces = False  # a server-side compaction's item: it stands for every item before it

    def feed(self, ev: TokenEvent) -> list[Event]:
        self.summary += ev.text  # thinking and tools are off: the text is the summary
        return []

    def finish_events(self) -> list[Event]:
        final, summary = self.run.final, self.summary.strip()
        if final is not None and final.finish_reason == "length":  # cut, but a compaction all the same
            summary = compaction.cut_note(summary, self.run.output_tokens)
        self.status = "completed"
        it = compaction.item(summary, self.replaces)
        self.output.append(it)
        return [self._event("response.output_item.added", output_index=0, item=dict(it)),
                self._event("response.output_item.done", output_index=0, item=dict(it)),
                self._event(f"response.{self.status}", response=self.response())]


def _summed(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two usage objects of one shape added up, field by field."""
    return {k: _summed(v, b[k]) if isinstance(v, dict) else v + b[k] for k, v in a.items()}
