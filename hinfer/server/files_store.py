"""OpenAI Files, in memory: a batch's input JSONL uploaded by the client, and the output and error files a batch
writes (openai_batches.py). Bounded: at most KEPT_BYTES of file contents and KEPT_FILES files; an upload past
either is a 413 / 429 naming what to delete."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from email import policy
from email.parser import BytesParser
from typing import Any

from hinfer.server.errors import APIError, bad_request
from hinfer.server.ids import new_id

KEPT_BYTES = 512 << 20  # file contents kept together
KEPT_FILES = 1024
UPLOAD_PURPOSES = ("batch", "user_data")  # what a client uploads (a batch's own files are "batch_output")


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int = field(default_factory=lambda: int(time.time()))

    def body(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data), "created_at": self.created_at,
                "expires_at": None, "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "status_details": None}  # fmt: skip


class FileStore:
    def __init__(self) -> None:
        self._files: OrderedDict[str, StoredFile] = OrderedDict()
        self._bytes = 0

    def add(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        if len(self._files) >= KEPT_FILES:
            raise APIError(429, f"{KEPT_FILES} files are stored: delete some first (DELETE /v1/files/{{id}})")
        if self._bytes + len(data) > KEPT_BYTES:
            raise APIError(413, f"the stored files would pass {KEPT_BYTES >> 20} MiB: delete some first "
                                "(DELETE /v1/files/{id})")  # fmt: skip
        f = StoredFile(new_id("file-"), filename, purpose, data)
        self._files[f.id] = f
        self._bytes += len(data)
        return f

    def get(self, file_id: str) -> StoredFile | None:
        return self._files.get(file_id)

    def delete(self, file_id: str) -> bool:
        f = self._files.pop(file_id, None)
        if f is not None:
            self._bytes -= len(f.data)
        return f is not None

    def newest_first(self) -> list[StoredFile]:
        return list(reversed(self._files.values()))


def parse_upload(content_type: str, body: bytes) -> tuple[str, str, bytes]:
    """(filename, purpose, contents) of a multipart/form-data upload with a `file` part and a `purpose` field, as
    the OpenAI SDK's `files.create` sends it; a 400 for anything else. Parsed by the standard library's MIME
    parser (the form's parts are MIME parts)."""
    if not content_type.lower().startswith("multipart/form-data") or "boundary=" not in content_type:
        raise bad_request("a file is uploaded as multipart/form-data with a `file` part and a `purpose` field",
                          param="file")  # fmt: skip
    msg = BytesParser(policy=policy.HTTP).parsebytes(b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n"
                                                     + body)  # fmt: skip
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in msg.iter_parts() if msg.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str) and name not in fields:
            fields[name] = (part.get_filename(), part.get_payload(decode=True) or b"")
    if "file" not in fields:
        raise bad_request("the upload has no `file` part", param="file")
    purpose = fields.get("purpose", (None, b""))[1].decode("utf-8", "replace").strip()
    if purpose not in UPLOAD_PURPOSES:
        raise bad_request(f"purpose: one of 'batch', 'user_data' (got {purpose[:40]!r})", param="purpose")
    filename, data = fields["file"]
    return (filename or "upload.jsonl")[:255], purpose, data
