"""`hinfer serve`: flags and wiring (engine factory and the HTTP server replaced by fakes)."""

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
    from hinfer.server import http_server

    # A stand-in factory module: the real one imports torch and the model (seconds), which this test never needs.
    factory = types.ModuleType("hinfer.engine.factory")
    monkeypatch.setitem(sys.modules, "hinfer.engine.factory", factory)
    seen = {}

    def fake_create_engine(model, ecfg):
        seen["model"], seen["ecfg"] = model, ecfg
        return ScriptedEngine(tokenizer, {}, max_context=ecfg.max_context), tokenizer, "from-factory"

    def fake_serve(app, sock, drain, limits):
        seen["app"], seen["sock"], seen["limits"] = app, sock.getsockname(), limits

    factory.create_engine = fake_create_engine
    monkeypatch.setattr(http_server, "serve", fake_serve)
    monkeypatch.delenv("HINFER_API_KEY", raising=False)
    rc = main(["serve", "--port", "0", "--shutdown-timeout", "7", "--max-connections", "9", "--api-key", "k", "--cors", "http://a, http://b", "--served-model-name",
               f"{MODEL},claude-x", "--preserve-thinking", "--max-context", "2048", "--max-concurrency", "2"])
    assert rc == 0
    assert seen["model"] == "demo" and seen["ecfg"].max_context == 2048 and seen["ecfg"].max_concurrency == 2
    assert seen["sock"][0] == "127.0.0.1" and seen["sock"][1] > 0
    assert seen["limits"].shutdown_timeout_s == 7 and seen["limits"].max_connections == 9
    st = seen["app"].state.hinfer
    assert st.model_name == MODEL and st.model_aliases == ("claude-x",) and st.preserve_thinking_default

    main(["serve", "/some/ckpt", "--port", "0"])
    assert seen["model"] == "/some/ckpt" and seen["app"].state.hinfer.model_name == "from-factory"


def test_serve_rejects_model_and_demo(capsys):
    assert main(["serve", "/x", "--demo"]) == 1
    assert "not both" in capsys.readouterr().err


def _fake_factory(monkeypatch, tokenizer) -> dict:
    factory = types.ModuleType("hinfer.engine.factory")
    monkeypatch.setitem(sys.modules, "hinfer.engine.factory", factory)
    seen: dict = {}

    def fake_create_engine(model, ecfg):
        seen["ecfg"] = ecfg
        return ScriptedEngine(tokenizer, {}, max_context=ecfg.max_context), tokenizer, "x"

    factory.create_engine = fake_create_engine
    return seen


def test_max_context_beyond_the_model_is_a_startup_error(monkeypatch, tokenizer, tmp_path, capsys):
    import json

    from hinfer.demo import DEMO_OVERRIDES
    from hinfer.fixtures import config_dir
    from hinfer.server import http_server

    seen = _fake_factory(monkeypatch, tokenizer)
    monkeypatch.setattr(http_server, "serve", lambda *a, **k: None)
    assert DEMO_OVERRIDES["max_position_embeddings"] == 65536  # agents can be tried on the demo with 64K
    assert main(["serve", "--max-context", "65537"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --max-context 65537 is more than the demo model allows: its max_position_embeddings is "
                   "65536 tokens (use --max-context 65536 or less, or leave it out; --rope-scaling yarn:4 "
                   "extends it 4x)"]
    assert "ecfg" not in seen  # refused before anything was built
    assert main(["serve", "--max-context", "65536", "--port", "0"]) == 0 and seen["ecfg"].max_context == 65536
    assert main(["serve", "--port", "0"]) == 0 and seen.pop("ecfg").max_context == 65536  # the default
    # A checkpoint's own limit, read from its config.json alone.
    cfg = json.loads((config_dir("qwen3.5-0.8b") / "config.json").read_text())
    (cfg.get("text_config") or cfg)["max_position_embeddings"] = 512
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["serve", str(tmp_path), "--max-context", "1024"]) == 1
    assert "its max_position_embeddings is 512 tokens" in capsys.readouterr().err
    assert "ecfg" not in seen
    assert main(["generate", "--model", str(tmp_path), "--prompt", "x", "--max-context", "1024"]) == 1
    assert main(["plan", str(tmp_path), "--max-context", "1024"]) == 1
    assert "512 tokens" in capsys.readouterr().err


def test_max_context_error_exits_non_zero_from_the_shell():
    import subprocess

    r = subprocess.run([sys.executable, "-m", "hinfer", "serve", "--max-context", "1000000"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert [line for line in r.stderr.splitlines() if line.startswith("error:")] == [
        "error: --max-context 1000000 is more than the demo model allows: its max_position_embeddings is 65536 "
        "tokens (use --max-context 65536 or less, or leave it out; --rope-scaling yarn:4 extends it 4x)"]
    assert "Traceback" not in r.stderr
