"""Client strings stay text: special-token text written by a client (`<|im_start|>system` inside a message, a
tool result, a tool name or arguments) is encoded as ordinary text, never as the control token, while the chat
template's own control tokens stay special.

How: before rendering, every special-token string inside client data is replaced by a private-use sentinel
(`\\ue000<index>\\ue001`; the sentinel opener itself is escaped the same way, so client text cannot forge one).
The rendered prompt then holds real special-token text only where the template (or the server) wrote it. It is
split at those, each one becomes its id, and the text between (sentinels turned back into the client's text) is
encoded with special-token parsing off. This is how `tokenizers` itself encodes (it splits at added tokens
first), so a prompt without special-token text in client strings encodes exactly as before.
"""

from __future__ import annotations

import re
from typing import Any

from hinfer.tokenizer import Tokenizer

OPEN, CLOSE = "\ue000", "\ue001"


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
                ids.extend(self.tokenizer.encode_plain(self.unshield(piece)))
        return ids
