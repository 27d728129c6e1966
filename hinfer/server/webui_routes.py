"""The built-in web chat: GET / and its static files (hinfer/server/webui/, served as they are: no build step).

The files hold no data, so they are open without the API key (the page asks for the key and sends it with its
own API calls); create_app adds WEBUI_PATHS to the paths the key check lets through."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from hinfer.server.errors import APIError

WEBUI_DIR = Path(__file__).with_name("webui")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
# The page runs only its own files and talks only to this origin: injected markup could not load or send anything.
_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",  # revalidate, so a new version of the page shows after an upgrade
}


def webui_files() -> dict[str, Path]:
    """URL path -> file: `/` is index.html, every other file is /webui/NAME (a fixed list: no path from a client
    ever reaches the file system)."""
    files = {"/": WEBUI_DIR / "index.html"}
    for p in sorted(WEBUI_DIR.iterdir()):
        if p.is_file() and p.suffix in _TYPES and p.name != "index.html":
            files[f"/webui/{p.name}"] = p
    return files


WEBUI_PATHS = frozenset(webui_files())
router = APIRouter(include_in_schema=False)


def _serve(path: str) -> Response:
    file = webui_files().get(path)
    if file is None:
        raise APIError(404, f"no such file of the web page: {path}", code="not_found")
    return Response(file.read_bytes(), media_type=_TYPES[file.suffix], headers=_HEADERS)


@router.api_route("/", methods=["GET", "HEAD"])
async def index() -> Response:
    return _serve("/")


@router.api_route("/webui/{name}", methods=["GET", "HEAD"])
async def static_file(name: str) -> Response:
    return _serve(f"/webui/{name}")
