"""OpenAI's Files API, for batches: ``POST /v1/files`` (multipart, ``purpose=batch``),
``GET /v1/files``, ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``.

Files are kept per tenant in Redis (store/files.py), bounded in size and count, and expire.
Only batch inputs are taken; a batch's output and error files come back with ``purpose``
``batch_output``, as OpenAI's do.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from gateway.auth import Tenant
from gateway.openai.errors import OpenAIError
from gateway.openai.shared import error_responses
from gateway.state import State
from store.files import FileTooLarge, TooManyFiles

router = APIRouter(prefix="/v1/files", tags=["openai"])
_ERRORS = error_responses(400, 401, 404, 413)

FileId = Annotated[str, Path(min_length=1, max_length=64)]


def _not_found(file_id: str) -> OpenAIError:
    return OpenAIError(404, f"No such File object: {file_id}", param="id", code="not_found")


@router.post("", responses=_ERRORS)
async def create_file(request: Request, tenant: Tenant, state: State) -> dict[str, Any]:
    """Upload a file (multipart form: ``file`` and ``purpose``, which must be ``batch``)."""
    try:
        form = await request.form(max_files=1, max_fields=4)
    except Exception as e:  # not a multipart form: python-multipart says why
        raise OpenAIError(400, f"the body must be a multipart form with file and purpose ({e})") from None
    purpose, upload = form.get("purpose"), form.get("file")
    if purpose != "batch":
        raise OpenAIError(
            400, f"purpose {purpose!r} is not supported: toolq takes files for batches only ('batch')", param="purpose"
        )
    if not isinstance(upload, UploadFile):
        raise OpenAIError(400, "the form has no file part ('file')", param="file")
    content = await upload.read()
    try:
        stored = await state.files.put(tenant, upload.filename or "upload.jsonl", "batch", content)
    except FileTooLarge as e:
        raise OpenAIError(413, str(e), param="file", code="file_too_large") from None
    except TooManyFiles as e:
        raise OpenAIError(400, str(e), param="file", code="too_many_files") from None
    return stored.openai()


@router.get("", responses=_ERRORS)
async def list_files(
    tenant: Tenant,
    state: State,
    purpose: Annotated[str | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 10000,
) -> dict[str, Any]:
    files = await state.files.of_tenant(tenant, purpose=purpose, limit=limit)
    return {"object": "list", "data": [f.openai() for f in files], "has_more": False}


@router.get("/{file_id}", responses=_ERRORS)
async def retrieve_file(file_id: FileId, tenant: Tenant, state: State) -> dict[str, Any]:
    stored = await state.files.get(tenant, file_id)
    if stored is None:
        raise _not_found(file_id)
    return stored.openai()


@router.get("/{file_id}/content", responses=_ERRORS)
async def file_content(file_id: FileId, tenant: Tenant, state: State) -> Response:
    content = await state.files.content(tenant, file_id)
    if content is None:
        raise _not_found(file_id)
    return Response(content, media_type="application/jsonl")


@router.delete("/{file_id}", responses=_ERRORS)
async def delete_file(file_id: FileId, tenant: Tenant, state: State) -> JSONResponse:
    if not await state.files.delete(tenant, file_id):
        raise _not_found(file_id)
    return JSONResponse({"id": file_id, "object": "file", "deleted": True})
