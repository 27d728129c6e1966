"""Server-side compaction of a Responses create request (OpenAI's `context_management: [{"type": "compaction",
"compact_threshold": N}]`): when the request's rendered prompt reaches N tokens, the model first writes a summary
of the conversation (compaction.py's summary run: thinking off, tools hidden, up to --compaction-max-tokens),
which leads the response's output as a `compaction` item; the answer is then generated from that item alone, the
context a later request that replays it has (compaction.context_start drops the items before it). Under N, the
request runs as it would without the field. The Anthropic twin: anthropic_compact.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from hinfer.server.errors import bad_request
from hinfer.server.generation import run_to_end
from hinfer.server.responses_run import Prepared, prepare, start
from hinfer.server.responses_stream import CompactionBuilder
from hinfer.server.schemas_responses import ResponsesRequest
from hinfer.server.state import ServerState

COMPACTION = "compaction"
DEFAULT_SHARE = 0.8  # compact_threshold omitted: this share of the server's context


def default_threshold(max_context: int) -> int:
    """The threshold of an entry without one: 80% of the context, leaving the summary room to be written."""
    return max(1, int(max_context * DEFAULT_SHARE))


def compact_threshold(raw: list[dict[str, Any]] | None, max_context: int) -> int | None:
    """`context_management` -> the prompt tokens at which the request is compacted (None: never); a bad entry
    is a 400 naming it."""
    threshold = None
    for i, entry in enumerate(raw or []):
        param = f"context_management.{i}"
        if entry.get("type") != COMPACTION:
            raise bad_request(f"unknown context_management entry type {entry.get('type')!r}; expected "
                              f"{COMPACTION!r}", param=f"{param}.type")  # fmt: skip
        if threshold is not None:
            raise bad_request(f"context_management takes one {COMPACTION!r} entry", param=param)
        n = entry.get("compact_threshold")
        if n is not None and (type(n) is not int or n < 1):
            raise bad_request("compact_threshold must be an integer of at least 1 (prompt tokens)",
                              param=f"{param}.compact_threshold")
        threshold = default_threshold(max_context) if n is None else n
    return threshold


@dataclass
class Compacted:
    item: dict[str, Any]  # the compaction item that leads the output
    usage: dict[str, Any]  # the summary run's (ResponseBuilder.usage)


async def summarize(st: ServerState, body: ResponsesRequest, items: list[dict[str, Any]],
                    http: HTTPConnection) -> Compacted:  # fmt: skip
    """The conversation `items` summarized by the model, run to its end (a cut summary is still one)."""
    req = body.model_copy(update={"max_output_tokens": None})  # the answer's budget; the summary has its own
    run, b = await start(st, req, await prepare(st, req, items, compacting=True), http)
    assert isinstance(b, CompactionBuilder)
    await run_to_end(run, b.feed)
    b.replaces = True
    b.finish_events()
    return Compacted(b.output[0], b.usage())


async def prepared(st: ServerState, body: ResponsesRequest, items: list[dict[str, Any]], http: HTTPConnection,
                   compacting: bool) -> tuple[Prepared, Compacted | None]:  # fmt: skip
    """The run that answers the request, checked and rendered: over `items`, or, once their prompt reaches the
    compaction threshold, over the compaction item alone (the summary run done first). `compacting`: the
    request asks for the summary itself (compaction.py), which no threshold changes."""
    threshold = compact_threshold(body.context_management, st.engine.max_context)
    p = await prepare(st, body, items, compacting)
    if compacting or threshold is None or len(p.ids) < threshold:
        return p, None
    compacted = await summarize(st, body, items, http)
    return await prepare(st, body, [compacted.item], compacting=False), compacted
