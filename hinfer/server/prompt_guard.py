"""Client strings stay text: special-token text written by a client (`<|im_start|>system` inside a message, a
tool result, a tool name or arguments) is encoded as ordinary text, never as the control token, while the chat
template's own control tokens stay special.

How: before rendering, every special-token string inside client data is replaced by a private-use sentinel
(`\\ue000<index>\\ue001`; the sentinel opener itself is escaped the same way, so client text cannot forge one).
The rendered prompt then holds real special-token text only where the template (or the server) wrote it. It is
split at those, each one becomes its id, and the text between (sentinels turned back into the client's text) is
encoded with special-token parsing off. This is how `tokenizers` itself encodes (it splits at added tokens
first), so a prompt without special-token text in client strings encodes exactly as before.

The pieces' ids are kept (MEMO_CHARS): an agent sends its whole conversation every turn, and all but its newest
messages render to the same pieces as the turn before, so a 66K-token prompt's encoding (about 0.1 s on a CPU core)
shrinks to that of its new messages.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from typing import Any

from hinfer.tokenizer import Tokenizer

OPEN, CLOSE = "\ue000", "\ue001"
# The encoded pieces kept (least recently used dropped first, at most this many characters of them): an agent's
# next turn re-renders the whole conversation, whose earlier messages are the same pieces again. 16M characters
# hold a few long sessions (a 66K-token conversation is about 250K characters) in about 32 MB.
MEMO_CHARS = 1 << 24
MEMO_MIN_CHARS = 64  # shorter pieces are encoded again: cheaper than keeping them


class PromptGuard:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        specials = tokenizer.special_token_strings  # longest first: the alternation prefers the longest match
        self._escaped = (*specials, OPEN)
        self._shield_re = re.compile("|".join(re.escape(s) for s in self._escaped))
        self._index = {s: i for i, s in enumerate(self._escaped)}
        self._sentinel_re = re.compile(re.escape(OPEN) + r"(\d+)" + re.escape(CLOSE))
        self._special_re = re.compile("(" + "|".join(re.escape(s) for s in specials) + ")") if specials else None
        self._ids = {s: tokenizer.token_to_id(s) for s in specials}
        self._memo: OrderedDict[str, array] = OrderedDict()  # shielded piece -> its ids
        self._memo_chars = 0
        self._lock = threading.Lock()  # prompts render in worker threads
        # the tokenizer that reads special-token text as text: built here (it parses the whole tokenizer.json,
        # holding the GIL for most of a second), so a server builds it at startup, not in a request's thread
        tokenizer.encode_plain("")

    def shield(self, value: Any) -> Any:
        """A copy of JSON-like client data with special-token text (in strings and keys) made inert."""
        if isinstance(value, str):
            return self._shield_re.sub(lambda m: f"{OPEN}{self._index[m.group(0)]}{CLOSE}", value)
        if isinstance(value, dict):
            return {self.shield(k): self.shield(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.shield(v) for v in value]
        return value

    def unshield(self, text: str) -> str:
        return self._sentinel_re.sub(lambda m: self._escaped[int(m.group(1))], text)

    def encode(self, rendered: str) -> list[int]:
        """Token ids of a prompt rendered from shielded data."""
        if self._special_re is None:
            return self.tokenizer.encode_plain(self.unshield(rendered))
        ids: list[int] = []
        for i, piece in enumerate(self._special_re.split(rendered)):
            if i % 2:  # a control token the template wrote
                ids.append(self._ids[piece])
            elif piece:
                ids.extend(self._piece_ids(piece))
        return ids

    def _piece_ids(self, piece: str) -> list[int] | array:
        """The ids of the text between two control tokens, from the memo when it was encoded lately."""
        if len(piece) < MEMO_MIN_CHARS:
            return self.tokenizer.encode_plain(self.unshield(piece))
        with self._lock:
            hit = self._memo.get(piece)
            if hit is not None:
                self._memo.move_to_end(piece)
                return hit
        ids = array("I", self.tokenizer.encode_plain(self.unshield(piece)))
        if len(piece) <= MEMO_CHARS // 4:  # one huge piece would push out everything else
            with self._lock:
                if piece not in self._memo:
                    self._memo[piece] = ids
                    self._memo_chars += len(piece)
                    while self._memo_chars > MEMO_CHARS:
                        old, _ = self._memo.popitem(last=False)
                        self._memo_chars -= len(old)
        return ids
