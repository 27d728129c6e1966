"""The live-server helper shared by the server tests (a uniquely named module: every test folder has a
conftest.py, so `from conftest import ...` would be ambiguous)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

MODEL = "qwen-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(app) -> Iterator[str]:
    """Run `app` under uvicorn in a background thread; yield its base URL (no trailing slash)."""
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def prompt_of(engine) -> str:
    """The last request's prompt as the scripted engine got it, special tokens spelled out."""
    return engine.tokenizer.decode(engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
