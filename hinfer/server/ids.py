"""Object ids: a type's prefix and 24 random hex digits (`resp_…`, `msg_…`, `conv_…`)."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"
