"""Opaque strings this server hands out and reads back (`encrypted_content` of reasoning and compaction items):
a prefix naming what they carry, then base64 of the text. Not a secret: the client holds the conversation
anyway; the prefix tells ours from another server's, which cannot be read."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Opaque:
    prefix: str

    def encode(self, text: str) -> str:
        return self.prefix + base64.b64encode(text.encode()).decode()

    def decode(self, blob: Any) -> str | None:
        """Our own string -> its text; anything else (another server's, or damaged) -> None."""
        if not isinstance(blob, str) or not blob.startswith(self.prefix):
            return None
        try:
            return base64.b64decode(blob[len(self.prefix):], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
