"""GET /health, GET /metrics, GET /v1/models[/{id}] (OpenAI shape, or Anthropic's when the client sends
`anthropic-version`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from hinfer.server.errors import APIError
from hinfer.server.openapi_responses import OPENAI_ERRORS
from hinfer.server.state import ServerState, get_state

log = logging.getLogger(__name__)
router = APIRouter(responses=OPENAI_ERRORS)
_HEALTH_503 = {503: {"description": "draining, or the engine failed",
                      "content": {"application/json": {"schema": {"type": "object"}}}}}


@router.get("/health", responses=_HEALTH_503)
async def health(request: Request):
    st = get_state(request)
    if st.drain.draining:  # load balancers stop sending requests here
        return JSONResponse({"status": "draining", "model": st.model_name}, status_code=503,
                            headers={"retry-after": "5"})
    try:
        s = st.engine.stats()
    except Exception as e:
        log.exception("engine.stats() failed")
        return JSONResponse({"status": "error", "message": f"{type(e).__name__}: {e}"}, status_code=503)
    if s.broken:  # no request can be served any more: a supervisor should restart the server
        return JSONResponse({"status": "error", "model": st.model_name, "message": s.broken}, status_code=503)
    return {"status": "ok", "model": st.model_name, "lanes_total": s.lanes_total, "lanes_busy": s.lanes_busy,
            "queue_depth": s.queue_depth, "max_context": st.engine.max_context}


@router.get("/metrics", response_class=PlainTextResponse)  # Prometheus text format
async def metrics(request: Request):
    st = get_state(request)
    try:
        stats = st.engine.stats()
    except Exception:
        log.exception("engine.stats() failed")
        stats = None
    batches = {"openai": st.batches.load(), "anthropic": st.message_batches.load()}
    return PlainTextResponse(st.metrics.render(stats, st.model_name, batches), media_type="text/plain; version=0.0.4")


def _openai_model(st: ServerState, name: str) -> dict:
    return {"id": name, "object": "model", "created": st.created, "owned_by": "hinfer",
            "max_model_len": st.engine.max_context}


def _anthropic_model(st: ServerState, name: str) -> dict:
    created = datetime.fromtimestamp(st.created, UTC).isoformat().replace("+00:00", "Z")
    return {"type": "model", "id": name, "display_name": name, "created_at": created}


@router.get("/v1/models")
async def list_models(request: Request):
    st = get_state(request)
    names = [st.model_name, *st.model_aliases]
    if "anthropic-version" in request.headers:
        data = [_anthropic_model(st, n) for n in names]
        return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
    return {"object": "list", "data": [_openai_model(st, n) for n in names]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    st = get_state(request)
    if model_id != st.model_name and model_id not in st.model_aliases:
        raise APIError(404, f"model {model_id!r} is not served here", param="model", code="model_not_found")
    if "anthropic-version" in request.headers:
        return _anthropic_model(st, model_id)
    return _openai_model(st, model_id)


@router.post("/admin/clear_prefix_cache")
async def clear_prefix_cache(request: Request):
    """Drop the engine's prefix cache (KV pages and GDN checkpoints no request uses) at its next step."""
    clear = getattr(get_state(request).engine, "clear_prefix_cache", None)
    if clear is None:
        raise APIError(501, "this engine has no prefix cache", code="not_implemented")
    clear()
    return {"status": "ok"}
