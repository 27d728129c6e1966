"""OpenAI Files and Batches routes (files_store.py, openai_batches.py): upload a batch's input, run it, read its
output."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from hinfer.server.drain import shutting_down_error
from hinfer.server.errors import APIError, bad_request
from hinfer.server.files_store import StoredFile, parse_upload
from hinfer.server.item_pages import page_after
from hinfer.server.openai_batches import FORWARDED, Batch
from hinfer.server.openapi_responses import OPENAI_ERRORS
from hinfer.server.schemas_openai import BatchCreateRequest
from hinfer.server.state import ServerState, get_state

router = APIRouter(responses=OPENAI_ERRORS)
UPLOAD = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "purpose"], "properties": {
        "file": {"type": "string", "format": "binary"}, "purpose": {"type": "string", "enum": ["batch", "user_data"]}},
}}}}}  # fmt: skip


def _file(st: ServerState, file_id: str) -> StoredFile:
    f = st.files.get(file_id)
    if f is None:
        raise APIError(404, f"No file with id '{file_id}'", param="file_id")
    return f


def _batch(st: ServerState, batch_id: str) -> Batch:
    b = st.batches.get(batch_id)
    if b is None:
        raise APIError(404, f"No batch with id '{batch_id}' (batches are kept in memory, the newest ones only)",
                       param="batch_id")  # fmt: skip
    return b


@router.post("/v1/files", openapi_extra=UPLOAD)
async def upload_file(request: Request):
    """A file (multipart/form-data: `file`, `purpose` batch or user_data), kept in memory."""
    st = get_state(request)
    filename, purpose, data = parse_upload(request.headers.get("content-type", ""), await request.body())
    return st.files.add(filename, purpose, data).body()


@router.get("/v1/files")
async def list_files(request: Request, after: str | None = None, limit: int = Query(10_000, ge=1, le=10_000),
                     purpose: str | None = None):  # fmt: skip
    files = [f.body() for f in get_state(request).files.newest_first() if purpose is None or f.purpose == purpose]
    return page_after(files, after, limit, "the files")


@router.get("/v1/files/{file_id}")
async def retrieve_file(file_id: str, request: Request):
    return _file(get_state(request), file_id).body()


@router.get("/v1/files/{file_id}/content", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}, "description": "the file's bytes"}})
async def file_content(file_id: str, request: Request):
    return Response(_file(get_state(request), file_id).data, media_type="application/octet-stream")


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, request: Request):
    st = get_state(request)
    _file(st, file_id)
    st.files.delete(file_id)
    return {"id": file_id, "object": "file", "deleted": True}


@router.post("/v1/batches")
async def create_batch(body: BatchCreateRequest, request: Request):
    """Run an uploaded JSONL file of requests (`input_file_id`, purpose batch) against `endpoint`, without the
    client; read it back with GET /v1/batches/{id}, its answers in `output_file_id` / `error_file_id`."""
    st = get_state(request)
    if st.drain.draining:
        raise shutting_down_error()
    if body.completion_window != "24h":
        raise bad_request("completion_window: '24h'", param="completion_window")
    headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
    batch = st.batches.create(st.files, body.input_file_id, body.endpoint, body.completion_window, body.metadata,
                              request.app, headers, st.engine.stats().lanes_total)  # fmt: skip
    return batch.body()


@router.get("/v1/batches")
async def list_batches(request: Request, after: str | None = None, limit: int = Query(20, ge=1, le=100)):
    return page_after([b.body() for b in get_state(request).batches.newest_first()], after, limit, "the batches")


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(batch_id: str, request: Request):
    return _batch(get_state(request), batch_id).body()


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, request: Request):
    """Stop a running batch: `cancelling` until its running requests have stopped, then `cancelled` with what it
    had answered written; an ended batch is returned as it is."""
    st = get_state(request)
    batch = _batch(st, batch_id)
    st.batches.cancel(batch)
    return batch.body()
