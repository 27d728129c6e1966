"""The web chat's files on the server side: GET / and /webui/*, what they load (nothing from elsewhere), the
API key (the page loads without it; the API it calls does not), and `--no-webui`. The page itself is driven in
a browser by test_webui_browser.py."""

from __future__ import annotations

import re
import sys
import tomllib
import types
from pathlib import Path

import pytest
from scripted_engine import ScriptedEngine
from server_live import MODEL
from starlette.testclient import TestClient

from hinfer.server import create_app
from hinfer.server.webui_routes import WEBUI_DIR, webui_files

KEY = "webui-test-key"
_REFS = re.compile(r"""(?:src|href)\s*=\s*"([^"]+)"|(?:from|import)\s*["']([^"']+)["']""")


def client(tokenizer, **kwargs) -> TestClient:
    engine = ScriptedEngine(tokenizer, {}, max_context=4096, model_name=MODEL)
    return TestClient(create_app(engine, tokenizer, model_name=MODEL, **kwargs))


def refs(path: Path) -> list[str]:
    return [a or b for a, b in _REFS.findall(path.read_text())]


def test_index_is_served_with_a_strict_content_policy(tokenizer):
    with client(tokenizer) as c:
        r = c.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="/webui/app.js">' in r.text
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert c.head("/").status_code == 200


def test_every_file_the_page_loads_is_served_from_the_package(tokenizer):
    """Each src/href of index.html and each JS import resolves to a packaged file with the right type; nothing
    comes from another origin (the page works offline)."""
    files = webui_files()
    assert {"/", "/webui/app.js", "/webui/style.css", "/webui/markdown.js"} <= set(files)
    with client(tokenizer) as c:
        for url, path in files.items():
            for ref in refs(path):
                if ref.startswith("data:"):
                    continue
                assert not re.match(r"^[a-z]+:|^//", ref), f"{path.name} loads {ref} from elsewhere"
                target = ref if ref.startswith("/") else "/webui/" + ref.removeprefix("./")
                assert target in files, f"{path.name} refers to {ref}, which is not in the package"
            r = c.get(url)
            assert r.status_code == 200 and r.content == path.read_bytes()
            kind = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}[path.suffix]
            assert r.headers["content-type"].startswith(kind)


def test_unknown_files_are_404_and_paths_never_leave_the_folder(tokenizer):
    with client(tokenizer) as c:
        for path in ("/webui/nope.js", "/webui/..%2fapp.py", "/webui/%2e%2e/webui_routes.py", "/webui/index.html",
                     "/webui/"):
            r = c.get(path)
            assert r.status_code == 404, path
            assert "error" in r.json()


def test_the_page_is_not_part_of_the_api_document(tokenizer):
    with client(tokenizer) as c:
        paths = c.get("/openapi.json").json()["paths"]
        assert "/" not in paths and not any(p.startswith("/webui") for p in paths)


def test_with_an_api_key_the_page_loads_and_the_api_still_needs_the_key(tokenizer):
    with client(tokenizer, api_key=KEY) as c:
        for url in webui_files():
            assert c.get(url).status_code == 200, url
        assert c.get("/v1/models").status_code == 401
        r = c.get("/metrics")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert c.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert c.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        # Only the page's own files are open: any other path still wants the key.
        assert c.get("/webui/nope.js").status_code == 401
        assert c.get("/webui/nope.js", headers={"x-api-key": KEY}).status_code == 404


def test_webui_off(tokenizer):
    with client(tokenizer, webui=False) as c:
        assert c.get("/").status_code == 404
        assert c.get("/webui/app.js").status_code == 404
        assert c.get("/health").status_code == 200
    with client(tokenizer, webui=False, api_key=KEY) as c:
        assert c.get("/").status_code == 401  # no longer an open path


def test_the_files_are_package_data():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["hinfer"]
    rel = WEBUI_DIR.relative_to(WEBUI_DIR.parents[1]).as_posix()
    assert f"{rel}/*" in patterns
    assert all(p.parent == WEBUI_DIR for p in webui_files().values())


@pytest.mark.parametrize("flags, on", [([], True), (["--no-webui"], False)])
def test_serve_flag(monkeypatch, tokenizer, flags, on):
    from hinfer.cli.main import main
    from hinfer.server import http_server

    factory = types.ModuleType("hinfer.engine.factory")
    factory.create_engine = lambda model, ecfg: (ScriptedEngine(tokenizer, {}, max_context=ecfg.max_context),
                                                 tokenizer, "x")
    monkeypatch.setitem(sys.modules, "hinfer.engine.factory", factory)
    seen = {}
    monkeypatch.setattr(http_server, "serve", lambda app, sock, drain, limits: seen.setdefault("app", app))
    assert main(["serve", "--port", "0", *flags]) == 0
    with TestClient(seen["app"]) as c:
        assert (c.get("/").status_code == 200) is on


def test_help_describes_no_webui(capsys):
    from hinfer.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    assert "--no-webui" in capsys.readouterr().out
