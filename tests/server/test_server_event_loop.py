"""A prompt of a few megabytes takes seconds to encode; the server keeps answering other requests meanwhile
(the encoding runs in a worker thread, and the tokenizer releases the GIL for long texts)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from server_live import MODEL

WORDS = 600_000  # 3 MB of text: far over the context, so the answer is a 400 once it is encoded (/tokenize: 200)


def _bodies(route: str) -> dict[str, tuple[str, dict]]:
    text = f"{route} " + "word " * WORDS  # a text of its own: the server keeps encoded pieces (prompt_guard.py)
    return {"chat": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": text}]}),
            "completions": ("/v1/completions", {"model": MODEL, "prompt": text}),
            "messages": ("/v1/messages", {"model": MODEL, "max_tokens": 10,
                                          "messages": [{"role": "user", "content": text}]}),
            "tokenize": ("/tokenize", {"prompt": text}),
            "tokenize_chat": ("/tokenize", {"messages": [{"role": "user", "content": text}]})}


@pytest.fixture
def slow_long_encodes(tokenizer, monkeypatch):
    """Texts over a megabyte take two more seconds to encode, asleep (holding no lock), so the encoding is most of
    a request however busy the machine, while what runs on the event loop (the body's parsing: up to 0.9 s seen
    on a busy two-core machine) takes what it takes."""
    for name in ("encode", "encode_plain"):
        real = getattr(tokenizer, name)

        def slow(text, *args, _real=real, **kwargs):
            if len(text) > 1_000_000:
                time.sleep(2.0)
            return _real(text, *args, **kwargs)

        monkeypatch.setattr(tokenizer, name, slow)


@pytest.mark.parametrize("route", ["chat", "completions", "messages", "tokenize", "tokenize_chat"])
def test_health_answers_while_a_huge_prompt_is_encoded(base_url, route, slow_long_encodes):
    path, body = _bodies(route)[route]
    done: dict[str, object] = {}

    def big() -> None:
        t = time.monotonic()
        r = httpx.post(base_url + path, json=body, timeout=300)
        done["status"], done["seconds"] = r.status_code, time.monotonic() - t

    thread = threading.Thread(target=big)
    thread.start()
    waits = []
    with httpx.Client(base_url=base_url, timeout=300) as c:
        while thread.is_alive():
            t = time.monotonic()
            assert c.get("/health").status_code == 200
            waits.append(time.monotonic() - t)
            time.sleep(0.02)
    thread.join()
    assert done["status"] == (200 if route.startswith("tokenize") else 400)  # /tokenize counts, it never refuses
    # On the event loop the encoding would hold /health for nearly the whole request.
    print(f"{route}: /health waited {max(waits):.2f} s at most during {done['seconds']:.2f} s")
    assert len(waits) >= 3 and max(waits) < done["seconds"] / 2, (max(waits), done["seconds"])


def test_long_texts_encode_as_short_ones_do(tokenizer):
    """Texts past the GIL-releasing threshold go through another tokenizers call: same ids."""
    tok = tokenizer
    piece = "Héllo <|im_start|>wörld <think> 你好 🌍\n\t  12345 "
    text = piece * (70_000 // len(piece) + 1)
    assert len(text) > 65_536
    assert tok.encode(text) == tok._tok.encode(text, add_special_tokens=False).ids
    plain = tok.encode_plain(text)
    assert plain == tok._plain_tok.encode(text, add_special_tokens=False).ids
    assert tok.token_to_id("<|im_start|>") not in plain and tok.token_to_id("<think>") in plain
