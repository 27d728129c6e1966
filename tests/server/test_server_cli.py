"""`hinfer serve`: flags and wiring (engine factory and uvicorn replaced by fakes)."""

from __future__ import annotations

import sys
import types

import pytest
from scripted_engine import ScriptedEngine
from server_live import MODEL

from hinfer.cli.main import build_parser, main


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    out = capsys.readouterr().out
    for flag in ("MODEL", "--demo", "--host", "--port", "--api-key", "--cors", "--served-model-name",
                 "--preserve-thinking", "--max-context", "--max-concurrency", "--max-pending-requests"):
        assert flag in out


def test_serve_wires_the_app(monkeypatch, tokenizer):
    import uvicorn

    # A stand-in factory module: the real one imports torch and the model (seconds), which this test never needs.
    factory = types.ModuleType("hinfer.engine.factory")
    monkeypatch.setitem(sys.modules, "hinfer.engine.factory", factory)
    seen = {}

    def fake_create_engine(model, ecfg):
        seen["model"], seen["ecfg"] = model, ecfg
        return ScriptedEngine(tokenizer, {}, max_context=ecfg.max_context), tokenizer, "from-factory"

    def fake_run(app, host, port, **kw):
        seen["app"], seen["host"], seen["port"] = app, host, port

    factory.create_engine = fake_create_engine
    monkeypatch.setattr(uvicorn, "run", fake_run)
    monkeypatch.delenv("HINFER_API_KEY", raising=False)
    rc = main(["serve", "--port", "9123", "--api-key", "k", "--cors", "http://a, http://b", "--served-model-name",
               f"{MODEL},claude-x", "--preserve-thinking", "--max-context", "2048", "--max-concurrency", "2"])
    assert rc == 0
    assert seen["model"] == "demo" and seen["ecfg"].max_context == 2048 and seen["ecfg"].max_concurrency == 2
    assert (seen["host"], seen["port"]) == ("127.0.0.1", 9123)
    st = seen["app"].state.hinfer
    assert st.model_name == MODEL and st.model_aliases == ("claude-x",) and st.preserve_thinking_default

    main(["serve", "/some/ckpt"])
    assert seen["model"] == "/some/ckpt" and seen["app"].state.hinfer.model_name == "from-factory"


def test_serve_rejects_model_and_demo(capsys):
    assert main(["serve", "/x", "--demo"]) == 1
    assert "not both" in capsys.readouterr().err
