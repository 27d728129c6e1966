"""A scripted engine slow enough to act on a running answer (a token every 20 ms: LONG takes about 8 s), for the
tests of work that runs without its client (background responses, batches), and the check they end with."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from server_live import MODEL, live_server

LONG = "Thinking.\n</think>\n\n" + "word " * 400  # about 8 s at 20 ms a token
SHORT = "Fine.\n</think>\n\nShort answer."
KEY = "slow-key"  # the API key of conftest's slow_keyed server


def slow_engine(tokenizer):
    from scripted_engine import ScriptedEngine

    return ScriptedEngine(tokenizer, {"[[long]]": LONG, "[[short]]": SHORT}, default=SHORT, lanes=2, max_pending=4,
                          step_s=0.02, max_context=4096, model_name=MODEL)  # fmt: skip


def lanes_free(engine, seconds: float = 10) -> None:
    """Every lane of `engine` free within `seconds` (what ran without a client has stopped)."""
    deadline = time.monotonic() + seconds
    while engine.busy and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.busy == 0


@contextlib.contextmanager
def slow_server(tokenizer, api_key: str | None = None) -> Iterator[tuple[object, str]]:
    """(the slow engine, the base URL of a live server on it)."""
    from hinfer.server import create_app

    engine = slow_engine(tokenizer)
    with live_server(create_app(engine, tokenizer, model_name=MODEL, api_key=api_key)) as url:
        yield engine, url
