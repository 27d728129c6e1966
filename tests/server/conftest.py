"""Server test fixtures: the real tokenizer, a scripted engine and a live uvicorn server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from server_live import MODEL, live_server

from hinfer.tokenizer import Tokenizer, fixture_tokenizer_dir


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    path = fixture_tokenizer_dir()
    if path is None:
        pytest.skip("the Qwen3.5 tokenizer fixture is not available (set HINFER_FIXTURES)")
    return Tokenizer.from_dir(path)


@pytest.fixture(scope="session")
def engine(tokenizer):
    from scripted_engine import ScriptedEngine
    from server_scripts import SCRIPTS

    return ScriptedEngine(tokenizer, SCRIPTS, default="Fine.\n</think>\n\nDefault answer.", lanes=4, max_pending=8,
                          max_context=4096, model_name=MODEL)


@pytest.fixture(scope="session")
def base_url(engine, tokenizer) -> Iterator[str]:
    """The shared live server (no API key)."""
    from hinfer.server import create_app

    with live_server(create_app(engine, tokenizer, model_name=MODEL, model_aliases=["alias-model"])) as url:
        yield url


@pytest.fixture(scope="session")
def demo_url() -> Iterator[str]:
    """A live server on the real engine with the built-in demo model (random weights), for what a scripted
    engine cannot show: grammars and prompt logprobs."""
    from hinfer.config import EngineConfig
    from hinfer.engine.factory import create_engine
    from hinfer.server import create_app

    engine, tok, name = create_engine("demo", EngineConfig(device="cpu", max_context=2048, max_concurrency=8))
    with live_server(create_app(engine, tok, model_name=name)) as url:
        yield url


@pytest.fixture(scope="session")
def demo_llm():
    """The demo model in-process (`LLM.logits`: the reference for what the server reports about prompts)."""
    from hinfer import LLM

    return LLM("demo", max_context=2048, max_concurrency=1)


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory):
    """HINFER_CACHE for `hinfer serve` subprocesses (server_proc.py): the demo model is written there once."""
    return tmp_path_factory.mktemp("hinfer-cache")


@pytest.fixture(scope="module")
def slow_keyed(tokenizer):
    """(engine, url): a live server with an API key (slow_scripts.KEY) on the slow scripted engine, one a module."""
    from slow_scripts import KEY, slow_server

    with slow_server(tokenizer, KEY) as s:
        yield s


@pytest.fixture(scope="module")
def slow_engine(slow_keyed):
    return slow_keyed[0]


@pytest.fixture(scope="module")
def slow_url(slow_keyed):
    return slow_keyed[1]


@pytest.fixture(scope="module")
def http(base_url) -> Iterator[httpx.Client]:
    """An HTTP client of the live scripted server, one a module."""
    with httpx.Client(base_url=base_url, timeout=30) as c:
        yield c
