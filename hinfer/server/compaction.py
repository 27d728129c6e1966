"""Compaction of a Responses conversation: Codex CLI's remote compaction (a `compaction_trigger` item ending the
input of `POST /v1/responses`), OpenAI's `POST /v1/responses/compact`, and the server-side compaction a create
request's `context_management` asks for (responses_compact.py).

The model writes a summary of the conversation so far; it travels in one `compaction` item whose
`encrypted_content` only this server reads back (base64 of the text: not a secret, the client holds the
conversation anyway). Replayed in a later request's input, the item becomes a user message carrying the
summary; another server's encrypted compaction cannot be read, and a note in its place says so. A server-side
compaction's item stands for everything before it (its own prefix says so): the items before it are dropped.
"""

from __future__ import annotations

import logging
from typing import Any

from hinfer.server.errors import bad_request
from hinfer.server.ids import new_id
from hinfer.server.opaque import Opaque

log = logging.getLogger(__name__)

TRIGGER = "compaction_trigger"
ITEM_TYPES = ("compaction", "compaction_summary")
SUMMARY = Opaque("hinfer-compaction:")  # a compaction item's encrypted_content
CONTEXT = Opaque("hinfer-compacted-context:")  # a server-side compaction's: it replaces the items before it

PROMPT = (
    "Your context is about to be compacted: everything above will be replaced by what you write now. Write a "
    "summary that lets you, or another assistant, continue the task without the conversation. Include the "
    "user's goal and every requirement or constraint they gave; what has been done so far (files read or "
    "changed, commands run and what they showed, decisions taken and why); the current state of the work; "
    "open questions and errors not yet solved; and the exact next steps. Quote names, paths, identifiers and "
    "values exactly. Write only the summary, with no tool calls."
)
SUMMARY_HEAD = "An earlier part of this conversation was compacted. Its summary:\n\n"
UNREADABLE = ("[An earlier part of this conversation was compacted by another server; its summary is encrypted "
              "for that server and cannot be read here.]")


def cut_note(summary: str, tokens: int) -> str:
    """A summary the budget cut: still a compaction (a client treats a cut one as a failure and goes on with the
    whole conversation), saying it was cut."""
    log.warning("a compaction summary reached its budget of %d tokens (--compaction-max-tokens) and was cut", tokens)
    return f"{summary}\n\n[This summary was cut at {tokens} tokens.]"


def item(summary: str, replaces: bool = False) -> dict[str, Any]:
    """The output item a compaction answers with; `replaces`: a server-side compaction's, which stands for every
    item before it when it comes back."""
    return {"id": new_id("cmp_"), "type": "compaction",
            "encrypted_content": (CONTEXT if replaces else SUMMARY).encode(summary)}


def _summary_of(it: dict[str, Any]) -> str | None:
    """The summary our own compaction item carries (None: another server's, or damaged)."""
    blob = it.get("encrypted_content")
    text = SUMMARY.decode(blob)
    return text if text is not None else CONTEXT.decode(blob)


def context_start(items: list[Any]) -> int:
    """Where the conversation the model sees starts: at the last server-side compaction item (0: none)."""
    for i in range(len(items) - 1, -1, -1):
        it = items[i]
        if isinstance(it, dict) and it.get("type") in ITEM_TYPES:
            if CONTEXT.decode(it.get("encrypted_content")) is not None:
                return i
    return 0


_warned_foreign = False


def replayed_text(it: dict[str, Any]) -> str:
    """The user message a `compaction` (or `compaction_summary`) input item stands for."""
    global _warned_foreign
    summary = _summary_of(it)
    if summary is None and isinstance(it.get("summary"), str):  # a plain-text summary some clients send
        summary = it["summary"]
    if summary is not None:
        return SUMMARY_HEAD + summary
    if not _warned_foreign:
        _warned_foreign = True
        log.warning("a compaction item from another server cannot be read: its place in the prompt says so")
    return UNREADABLE


def split_trigger(items: list[Any]) -> tuple[list[Any], bool]:
    """-> (the conversation without a final `compaction_trigger`, whether it ended in one). A trigger anywhere
    else is a 400: it asks for the compaction of everything before it."""
    found = [i for i, it in enumerate(items) if isinstance(it, dict) and it.get("type") == TRIGGER]
    if not found:
        return items, False
    if found != [len(items) - 1]:
        early = next(i for i in found if i != len(items) - 1)
        raise bad_request("a 'compaction_trigger' item must be the last input item, and only one",
                          param=f"input.{early}")
    if len(items) == 1:
        raise bad_request("nothing to compact: the input has only the 'compaction_trigger' item", param="input")
    return items[:-1], True


def without_trigger(items: list[Any]) -> list[Any]:
    """A request's own input items as a conversation keeps them: the trigger was a request, not a turn."""
    return [it for it in items if not (isinstance(it, dict) and it.get("type") == TRIGGER)]


def request_items(items: list[Any]) -> list[Any]:
    """The conversation to compact, then the request for its summary."""
    return [*items, {"type": "message", "role": "user", "content": PROMPT}]


def kept_user_messages(items: list[Any]) -> list[dict[str, Any]]:
    """The user messages of a conversation as `POST /v1/responses/compact` answers them (before its compaction
    item, as OpenAI does): message items with `input_text` (and `input_image`) parts; those before a server-side
    compaction are left out, its summary standing for them."""
    out = []
    for it in items[context_start(items):]:
        if not isinstance(it, dict) or it.get("role") != "user" or it.get("type", "message") != "message":
            continue
        content = it.get("content")
        parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else list(content or [])
        out.append({"id": new_id("msg_"), "type": "message", "status": "completed", "role": "user",
                    "content": parts})
    return out
