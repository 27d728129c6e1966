"""Engine events -> OpenAI response objects and stream chunks (chat and legacy completions)."""

from __future__ import annotations

import time
from typing import Any

from hinfer.engine.protocol import TokenEvent
from hinfer.server.finite import wire_logprob
from hinfer.server.generation import EngineRun
from hinfer.server.ids import new_id
from hinfer.server.output import OutputParser, Piece, ReasoningPiece
from hinfer.server.responses_tools import custom_input
from hinfer.server.spec_usage import spec_usage
from hinfer.server.state import ServerState
from hinfer.server.tool_parser import TextPiece, ToolCallArgs, ToolCallEnd, ToolCallStart


def _finish_reason(run: EngineRun, has_tool_calls: bool) -> str:
    reason = run.final.finish_reason if run.final is not None else "stop"
    if reason == "length":
        return "length"
    return "tool_calls" if has_tool_calls else "stop"  # "abort" only reaches a client that has left


def pieces_to_delta(pieces: list[Piece], custom: frozenset[str] = frozenset(),
                    texts: dict[int, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A chunk's delta. A custom (freeform) tool's call (its name in `custom`) opens with an empty `input` and sends
    its text whole when it ends (gathered in `texts` meanwhile, by call index), as the Responses API streams it."""
    delta: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    texts = {} if texts is None else texts
    for p in pieces:
        if isinstance(p, ReasoningPiece):
            delta["reasoning_content"] = delta.get("reasoning_content", "") + p.text
        elif isinstance(p, TextPiece):
            delta["content"] = delta.get("content", "") + p.text
        elif isinstance(p, ToolCallStart) and p.name in custom:
            texts[p.index] = ""
            calls[p.index] = {"index": p.index, "id": p.id, "type": "custom", "custom": {"name": p.name, "input": ""}}
        elif isinstance(p, ToolCallStart):
            calls[p.index] = {"index": p.index, "id": p.id, "type": "function",
                              "function": {"name": p.name, "arguments": ""}}
        elif isinstance(p, ToolCallArgs) and p.index in texts:
            texts[p.index] += p.delta
        elif isinstance(p, ToolCallArgs):
            entry = calls.setdefault(p.index, {"index": p.index, "function": {"arguments": ""}})
            entry["function"]["arguments"] += p.delta
        elif isinstance(p, ToolCallEnd) and p.index in texts:
            entry = calls.setdefault(p.index, {"index": p.index, "custom": {}})
            entry["custom"]["input"] = custom_input(texts.pop(p.index))
    if calls:
        delta["tool_calls"] = [calls[i] for i in sorted(calls)]
    return delta


class ChatBuilder:
    def __init__(self, st: ServerState, run: EngineRun, *, model: str, reasoning: bool,
                 tools: dict[str, dict[str, Any]] | None, logprobs: bool, max_calls: int | None = None,
                 trim_strings: bool = False, response_id: str | None = None, index: int = 0,
                 custom: frozenset[str] = frozenset()):
        self.st = st
        self.run = run
        self.id = response_id or run.request_id
        self.index = index
        self.model = model
        self.created = int(time.time())
        self.parser = OutputParser(reasoning=reasoning, tools=tools, new_id=lambda: new_id("call_"),
                                   max_calls=max_calls, trim_strings=trim_strings)
        self.want_logprobs = logprobs
        self.custom = custom  # custom tools' names: their calls are text (`custom.input`), not JSON arguments
        self._texts: dict[int, str] = {}  # the open custom calls' arguments so far
        self.reasoning_tokens = 0
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.logprobs: list[dict[str, Any]] = []
        self.prompt_logprobs: list[dict[str, Any] | None] | None = None  # with the request's prompt_logprobs

    # -- shared by both modes -------------------------------------------------------------------------

    def feed(self, ev: TokenEvent) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        if self.parser.in_reasoning:
            self.reasoning_tokens += len(ev.token_ids)
        if ev.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = prompt_logprobs_wire(self.st, self.run.prompt_ids, ev)
        delta = self._collect(self.parser.feed(ev.text))
        lp = self._logprobs(ev) if self.want_logprobs else None
        if lp:
            self.logprobs.extend(lp)
        return delta, lp

    def finish(self) -> dict[str, Any]:
        return self._collect(self.parser.flush())

    def _collect(self, pieces: list[Piece]) -> dict[str, Any]:
        for p in pieces:
            if isinstance(p, ReasoningPiece):
                self.reasoning.append(p.text)
            elif isinstance(p, TextPiece):
                self.content.append(p.text)
        return pieces_to_delta(pieces, self.custom, self._texts)

    def _logprobs(self, ev: TokenEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if ev.logprobs is None:
            return out
        for i, tid in enumerate(ev.token_ids):
            tok = self.st.token_text(tid)
            entry: dict[str, Any] = {
                "token": tok,
                "logprob": wire_logprob(ev.logprobs[i] if i < len(ev.logprobs) else 0.0),
                "bytes": self.st.token_bytes(tid),
                "top_logprobs": [],
            }
            if ev.top_logprobs and i < len(ev.top_logprobs):
                for t in ev.top_logprobs[i]:
                    tt = self.st.token_text(t.token_id)
                    entry["top_logprobs"].append({"token": tt, "logprob": wire_logprob(t.logprob),
                                                  "bytes": self.st.token_bytes(t.token_id)})
            out.append(entry)
        return out

    def usage(self) -> dict[str, Any]:
        p, c = self.run.prompt_tokens, self.run.output_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                "prompt_tokens_details": {"cached_tokens": self.run.cached_tokens},
                "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens}}

    def finish_reason(self) -> str:
        return _finish_reason(self.run, bool(self.parser.calls))

    # -- streaming ------------------------------------------------------------------------------------

    def chunk(self, delta: dict[str, Any], *, finish_reason: str | None = None,
              logprobs: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": self.index, "delta": delta, "logprobs": None,
                                  "finish_reason": finish_reason}
        if logprobs:
            choice["logprobs"] = {"content": logprobs}
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": None, "choices": [choice], **extra}

    def usage_chunk(self, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": None, "choices": [], "usage": usage or self.usage(),
                "timings": self.run.timings()}

    # -- non-streaming --------------------------------------------------------------------------------

    def response(self) -> dict[str, Any]:
        return chat_response([self])

    def choice(self) -> dict[str, Any]:
        calls = [{"id": c.id, "type": "custom", "custom": {"name": c.name, "input": custom_input(c.arguments_json)}}
                 if c.name in self.custom else
                 {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
                 for c in self.parser.calls]  # fmt: skip
        content = "".join(self.content)
        message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if calls:
            message["tool_calls"] = calls
        return {"index": self.index, "message": message, "finish_reason": self.finish_reason(),
                "logprobs": {"content": self.logprobs} if self.want_logprobs else None}


def chat_usage(builders: list[ChatBuilder]) -> dict[str, Any]:
    """The prompt once (every choice shares it), the completion and reasoning tokens of every choice."""
    u = builders[0].usage()
    for b in builders[1:]:
        c = b.run.output_tokens
        u["completion_tokens"] += c
        u["total_tokens"] += c
        u["completion_tokens_details"]["reasoning_tokens"] += b.reasoning_tokens
    return u | spec_usage(b.run for b in builders)


def chat_response(builders: list[ChatBuilder]) -> dict[str, Any]:
    b = builders[0]
    out = {"id": b.id, "object": "chat.completion", "created": b.created, "model": b.model,
           "system_fingerprint": None, "choices": [x.choice() for x in builders], "usage": chat_usage(builders),
           "timings": b.run.timings()}
    if b.run.sampling.prompt_logprobs is not None:
        out["prompt_logprobs"] = b.prompt_logprobs
    return out


def prompt_logprobs_wire(st: ServerState, prompt_ids: list[int], ev: TokenEvent) -> list[dict[str, Any] | None]:
    """vLLM's shape: None for the first prompt token, then for each one a dict by token id (as a string) of
    {logprob, rank, decoded_token}: the prompt's own token first, then the most likely ones (ranks 1..n)."""
    n = len(ev.prompt_logprobs or [])
    tops = ev.prompt_top_logprobs or [None] * n
    ranks = ev.prompt_ranks or [None] * n
    out: list[dict[str, Any] | None] = [None]
    for tid, lp, top, rank in list(zip(prompt_ids, ev.prompt_logprobs or [], tops, ranks))[1:]:
        entry = {str(tid): {"logprob": wire_logprob(lp), "rank": rank, "decoded_token": st.token_text(tid)}}
        for r, t in enumerate(top or [], start=1):
            entry.setdefault(str(t.token_id), {"logprob": wire_logprob(t.logprob), "rank": r,
                                               "decoded_token": st.token_text(t.token_id)})
        out.append(entry)
    return out


class CompletionBuilder:
    """One choice of a legacy /v1/completions answer: raw text, no template, no reasoning or tool parsing.
    `echo`: the prompt text goes first (with its tokens' logprobs when logprobs are asked: the engine ran with
    prompt_logprobs). `score_only` (max_tokens 0 with echo): the one token the engine generated is dropped."""

    def __init__(self, st: ServerState, run: EngineRun, *, response_id: str, index: int, model: str,
                 created: int, logprobs: bool, echo: str | None, score_only: bool = False):
        self.st = st
        self.run = run
        self.id = response_id
        self.index = index
        self.model = model
        self.created = created
        self.want_logprobs = logprobs
        self.echo = echo
        self.score_only = score_only
        self.text: list[str] = []
        self.offset = len(echo) if echo else 0
        self._first = True
        self.lp: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}

    def feed(self, ev: TokenEvent) -> tuple[str, dict[str, list[Any]] | None]:
        text = "" if self.score_only else ev.text
        part: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        if self._first:
            self._first = False
            text = (self.echo or "") + text
            if self.want_logprobs and ev.prompt_logprobs is not None:
                self._prompt_part(part, ev)
        if self.want_logprobs and ev.logprobs is not None and not self.score_only:
            for i, tid in enumerate(ev.token_ids):
                tops = ev.top_logprobs[i] if ev.top_logprobs and i < len(ev.top_logprobs) else []
                self.offset = self._add(part, tid, ev.logprobs[i] if i < len(ev.logprobs) else 0.0, tops,
                                        self.offset)  # fmt: skip
        self.text.append(text)
        if not part["tokens"]:
            return text, None
        for k, v in part.items():
            self.lp[k].extend(v)
        return text, part

    def _prompt_part(self, part: dict[str, list[Any]], ev: TokenEvent) -> None:
        offset = 0
        tops = ev.prompt_top_logprobs or [None] * len(ev.prompt_logprobs or [])
        for tid, lp, top in zip(self.run.prompt_ids, ev.prompt_logprobs or [], tops):
            offset = self._add(part, tid, lp, top or [], offset, first=lp is None)

    def _add(self, part: dict[str, list[Any]], tid: int, lp: float | None, tops: list, offset: int,
             first: bool = False) -> int:
        tok = self.st.token_text(tid)
        part["tokens"].append(tok)
        part["token_logprobs"].append(wire_logprob(lp))
        part["top_logprobs"].append(None if first else ({self.st.token_text(t.token_id): wire_logprob(t.logprob)
                                                          for t in tops} or None))
        part["text_offset"].append(offset)
        return offset + len(tok)

    @property
    def completion_tokens(self) -> int:
        return 0 if self.score_only else self.run.output_tokens

    def finish_reason(self) -> str:
        return "length" if self.score_only else _finish_reason(self.run, False)

    def chunk(self, text: str, *, finish_reason: str | None = None, logprobs: Any = None,
              **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [{"index": self.index, "text": text, "logprobs": logprobs,
                             "finish_reason": finish_reason}], **extra}

    def choice(self) -> dict[str, Any]:
        return {"index": self.index, "text": "".join(self.text), "finish_reason": self.finish_reason(),
                "logprobs": self.lp if self.want_logprobs else None}


def completion_usage(builders: list[CompletionBuilder], n: int) -> dict[str, Any]:
    """Each prompt counted once (choices j > 0 of a prompt share it), every choice's completion tokens."""
    firsts = builders[::n]
    p = sum(b.run.prompt_tokens for b in firsts)
    c = sum(b.completion_tokens for b in builders)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": sum(b.run.cached_tokens for b in firsts)},
            **spec_usage(b.run for b in builders)}


def completion_response(builders: list[CompletionBuilder], n: int) -> dict[str, Any]:
    b = builders[0]
    return {"id": b.id, "object": "text_completion", "created": b.created, "model": b.model,
            "choices": [x.choice() for x in builders], "usage": completion_usage(builders, n),
            "timings": b.run.timings()}
