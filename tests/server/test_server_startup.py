"""`hinfer serve` startup and connection limits, as a subprocess: a broken chat template and a busy port are
startup errors found before the model loads; slow headers and bodies are cut off; the connection cap holds."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from server_proc import serve_process
from websockets.sync.client import connect as ws_connect

from hinfer.fixtures import config_dir
from hinfer.tokenizer import fixture_tokenizer_dir

REPO = Path(__file__).resolve().parents[2]


def _serve(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = {"HINFER_CACHE": str(cache), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "hinfer", "serve", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def _checkpoint(tmp_path: Path, template: str) -> Path:
    """Checkpoint metadata only (no weights): the template check must come before anything loads them."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(config_dir("qwen3.5-0.8b") / "config.json", ckpt / "config.json")
    tok = fixture_tokenizer_dir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok / name, ckpt / name)
    (ckpt / "chat_template.jinja").write_text(template)
    return ckpt


@pytest.mark.parametrize("template,needle", [
    ("{% for m in messages %}{{ m.content }", "syntax error"),
    ("{{ raise_exception('this template is broken') }}", "this template is broken"),
], ids=["syntax", "render"])
def test_a_broken_chat_template_is_a_startup_error_naming_the_file(tmp_path, demo_cache, template, needle):
    ckpt = _checkpoint(tmp_path, template)
    r = _serve([str(ckpt), "--port", "0"], demo_cache)
    assert r.returncode == 1, r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and str(ckpt / "chat_template.jinja") in err[0] and needle in err[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_busy_port_fails_before_the_model_loads(demo_cache):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = _serve(["--port", str(port)], demo_cache)
    assert r.returncode == 1, r.stderr
    assert f"error: cannot listen on 127.0.0.1:{port}" in r.stderr and "--port" in r.stderr, r.stderr
    assert "memory plan" not in r.stderr and "loaded" not in r.stderr and "Traceback" not in r.stderr


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the server closes the connection (recv returns b"") within `seconds`."""
    sock.settimeout(seconds)
    try:
        data = sock.recv(4096)
        while data:  # an error response before the close is fine
            data = sock.recv(4096)
        return True
    except TimeoutError:
        return False


def test_slow_headers_and_bodies_are_cut_off_and_connections_are_capped(demo_cache):
    args = ["--header-timeout", "1", "--body-timeout", "1", "--max-connections", "3", "--max-context", "2048"]
    with serve_process(args, demo_cache) as sp:
        u = urlparse(sp.url)
        addr = (u.hostname, u.port)
        t0 = time.monotonic()
        with socket.create_connection(addr) as s:  # headers that never end
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            assert _closed_within(s, 30)
        with socket.create_connection(addr) as s:  # a body that never ends
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"model\": ")
            assert _closed_within(s, 30)
        with socket.create_connection(addr):  # a silent connection
            pass
        print(f"cut off in {time.monotonic() - t0:.1f} s")
        # An idle keep-alive connection is not a slow request: it lives past the header timeout.
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            conn.request("GET", "/v1/models")
            assert conn.getresponse().read() and conn.sock is not None
            sock = conn.sock
            time.sleep(2.5)
            conn.request("GET", "/v1/models")
            assert conn.getresponse().status == 200 and conn.sock is sock
        finally:
            conn.close()
        # A WebSocket is not a slow request either: an upgraded connection has no read deadline.
        with ws_connect(sp.url.replace("http://", "ws://") + "/v1/responses") as ws:
            time.sleep(2.5)
            ws.send(json.dumps({"type": "response.create", "model": "demo", "generate": False, "input": "hi"}))
            assert json.loads(ws.recv(timeout=30))["type"] == "response.created"
        # Three idle connections reach the cap of 3: a fourth gets a JSON 503 in its dialect, with Retry-After.
        idle = [socket.create_connection(addr) for _ in range(3)]
        try:
            time.sleep(0.2)
            r = httpx.get(sp.url + "/v1/models", timeout=30)
            assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
            assert r.json()["error"]["code"] == "too_many_connections"
            r = httpx.post(sp.url + "/v1/messages", json={}, timeout=30)
            assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded_error"
        finally:
            for s in idle:
                s.close()
        deadline = time.monotonic() + 30
        while httpx.get(sp.url + "/v1/models", timeout=30).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert "did not arrive within 1 s" in sp.log
