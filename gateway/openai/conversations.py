"""OpenAI's Conversations API over toolq threads (store/threads.py): a conversation is a
thread, under the same id, so /v1/threads/{id} and /v1/conversations/{id} are one conversation.

Shapes are those of openai.types.conversations: Conversation, ConversationDeletedResource,
ConversationItemList, and the items ``message``, ``function_call`` and ``function_call_output``.
A thread message becomes one item, except an assistant turn with calls, which becomes its text
(if any) and one ``function_call`` item per call (ids ``<message id>_call<k>``); deleting such an
item deletes the whole turn. ``conversation`` on POST /v1/responses runs the response as a run
of the thread (``run_in_conversation``): the input and the output are appended when it ends.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.auth import Tenant
from gateway.openai.errors import OpenAIError
from gateway.openai.responses.request import ConversationRef, input_messages
from gateway.state import GatewayState, State
from gateway.submission import admit, queue_full
from gateway.threads import threads_of
from store.admission import QueueAtLimit
from store.threads import RunRejected, ThreadInfo, ThreadNotFound
from toolq.errors import InvalidRequest
from toolq.wire.protocol import JobRequest, Message
from toolq.wire.thread_api import MAX_PAGE, check_metadata, page

router = APIRouter(prefix="/v1/conversations", tags=["openai"])
ConversationId = Annotated[str, Path(min_length=1, max_length=128, description="a conversation id")]
ItemId = Annotated[str, Path(min_length=1, max_length=160, description="an item id")]
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": "an error in OpenAI's shape"} for code in (400, 401, 404)
}
MAX_ITEMS = 20  # items in one create, as OpenAI allows
CALL = "_call"  # item id of an assistant turn's k-th call: <message id>_call<k>


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConversationCreate(_Strict):
    items: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_ITEMS)
    metadata: dict[str, str] | None = None

    _metadata = field_validator("metadata")(lambda v: None if v is None else check_metadata(v))


class ConversationUpdate(_Strict):
    metadata: dict[str, str] | None

    _metadata = field_validator("metadata")(lambda v: None if v is None else check_metadata(v))


class ItemsCreate(_Strict):
    items: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_ITEMS)


def conversation_id(ref: str | ConversationRef) -> str:
    return ref if isinstance(ref, str) else ref.id


def not_found(cid: str) -> OpenAIError:
    return OpenAIError(404, f"Conversation with id {cid!r} not found.", param="conversation_id", code="not_found")


def conversation(t: ThreadInfo) -> dict[str, Any]:
    return {"id": t.id, "object": "conversation", "created_at": t.created_ms // 1000, "metadata": t.metadata}


def items_of(msg_id: str, m: Message) -> list[dict[str, Any]]:
    """A thread message as conversation items."""
    if m.role == "tool":
        return [
            {
                "type": "function_call_output",
                "id": msg_id,
                "call_id": m.tool_call_id or "",
                "output": m.content or "",
                "status": "completed",
            }
        ]
    out: list[dict[str, Any]] = []
    if m.content or not m.tool_calls:
        part = (
            {"type": "output_text", "text": m.content or "", "annotations": [], "logprobs": []}
            if m.role == "assistant"
            else {"type": "input_text", "text": m.content or ""}
        )
        out.append({"type": "message", "id": msg_id, "role": m.role, "status": "completed", "content": [part]})
    for k, call in enumerate(m.tool_calls or ()):
        out.append(
            {
                "type": "function_call",
                "id": f"{msg_id}{CALL}{k}",
                "call_id": call.id,
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
                "status": "completed",
            }
        )
    return out


def messages_of(items: list[dict[str, Any]], param: str) -> list[Message]:
    try:
        return input_messages(items)
    except OpenAIError as e:  # input_messages names the field "input[i]": name this request's
        where = (e.field or "input").replace("input", param, 1)
        raise OpenAIError(400, e.message.replace("input[", f"{param}[", 1), param=where) from None


async def _messages(state: GatewayState, tenant: str, cid: str) -> list[tuple[str, Message]]:
    try:
        return await threads_of(state).messages(tenant, cid)
    except ThreadNotFound:
        raise not_found(cid) from None


async def _info(state: GatewayState, tenant: str, cid: str) -> ThreadInfo:
    try:
        return await threads_of(state).get(tenant, cid)
    except ThreadNotFound:
        raise not_found(cid) from None


def item_list(items: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else "",
        "last_id": items[-1]["id"] if items else "",
        "has_more": has_more,
    }


@router.post("", responses=_ERRORS)
async def create_conversation(body: ConversationCreate, tenant: Tenant, state: State) -> dict[str, Any]:
    """A conversation, with up to 20 initial items and metadata."""
    messages = messages_of(body.items or [], "items")
    t = await threads_of(state).create(tenant, metadata=body.metadata or {}, messages=messages)
    return conversation(t)


@router.get("/{conversation_id}", responses=_ERRORS)
async def get_conversation(conversation_id: ConversationId, tenant: Tenant, state: State) -> dict[str, Any]:
    return conversation(await _info(state, tenant, conversation_id))


@router.post("/{conversation_id}", responses=_ERRORS)
async def update_conversation(
    conversation_id: ConversationId, body: ConversationUpdate, tenant: Tenant, state: State
) -> dict[str, Any]:
    """Replace the conversation's metadata."""
    try:
        t = await threads_of(state).update_metadata(tenant, conversation_id, body.metadata or {})
    except ThreadNotFound:
        raise not_found(conversation_id) from None
    return conversation(t)


@router.delete("/{conversation_id}", responses=_ERRORS)
async def delete_conversation(conversation_id: ConversationId, tenant: Tenant, state: State) -> dict[str, Any]:
    """Delete the conversation (its items too; a response still running on it is cancelled)."""
    try:
        await threads_of(state).delete(tenant, conversation_id)
    except ThreadNotFound:
        raise not_found(conversation_id) from None
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


Include = Annotated[list[str] | None, Query(max_length=16, description="accepted; toolq has nothing to add")]


@router.get("/{conversation_id}/items", responses=_ERRORS)
async def list_items(
    conversation_id: ConversationId,
    tenant: Tenant,
    state: State,
    after: Annotated[str | None, Query(max_length=160)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    order: Literal["asc", "desc"] = "desc",
    include: Include = None,
) -> dict[str, Any]:
    """The conversation's items, newest first unless ``order=asc``, ``limit`` at a time after ``after``."""
    items = [(it["id"], it) for i, m in await _messages(state, tenant, conversation_id) for it in items_of(i, m)]
    try:
        chosen, more = page(items, after=after, limit=limit, order=order)
    except InvalidRequest:
        raise OpenAIError(400, f"after: no item {after!r} in this conversation", param="after") from None
    return item_list([it for _, it in chosen], more)


@router.post("/{conversation_id}/items", responses=_ERRORS)
async def create_items(
    conversation_id: ConversationId, body: ItemsCreate, tenant: Tenant, state: State, include: Include = None
) -> dict[str, Any]:
    """Add up to 20 items at the end of the conversation; answers with the items as stored."""
    messages = messages_of(body.items, "items")
    try:
        ids = await threads_of(state).add_messages(tenant, conversation_id, messages)
    except ThreadNotFound:
        raise not_found(conversation_id) from None
    return item_list([it for i, m in zip(ids, messages, strict=True) for it in items_of(i, m)], False)


def _find(messages: list[tuple[str, Message]], item_id: str) -> tuple[str, dict[str, Any]] | None:
    """(the thread message's id, the item) for an item id."""
    base = item_id.split(CALL, 1)[0]
    for i, m in messages:
        if i == base:
            return next(((i, it) for it in items_of(i, m) if it["id"] == item_id), None)
    return None


@router.get("/{conversation_id}/items/{item_id}", responses=_ERRORS)
async def get_item(
    conversation_id: ConversationId, item_id: ItemId, tenant: Tenant, state: State, include: Include = None
) -> dict[str, Any]:
    found = _find(await _messages(state, tenant, conversation_id), item_id)
    if found is None:
        raise OpenAIError(404, f"Item with id {item_id!r} not found.", param="item_id", code="not_found")
    return found[1]


@router.delete("/{conversation_id}/items/{item_id}", responses=_ERRORS)
async def delete_item(conversation_id: ConversationId, item_id: ItemId, tenant: Tenant, state: State) -> dict[str, Any]:
    """Delete an item; answers with the conversation, as OpenAI does."""
    found = _find(await _messages(state, tenant, conversation_id), item_id)
    if found is None or not await threads_of(state).forget_message(tenant, conversation_id, found[0]):
        raise OpenAIError(404, f"Item with id {item_id!r} not found.", param="item_id", code="not_found")
    return conversation(await _info(state, tenant, conversation_id))


async def run_in_conversation(
    state: GatewayState, tenant: str, ref: str | ConversationRef, job: JobRequest, *, instructions: int
) -> tuple[str, str]:
    """A response on a conversation: a run of its thread (waiting behind a response still running
    on it), the job seeing the instructions, the conversation's items, then the input. Returns
    (job id, model)."""
    cid = conversation_id(ref)
    if len(job.messages) <= instructions:
        raise OpenAIError(400, "input: a response on a conversation needs at least one input item", param="input")
    admitted = await admit(state, job, tenant)
    model = admitted.model
    try:
        placed = await threads_of(state).run(
            tenant, cid, admitted.request, model=model, strategy="enqueue", lead=instructions, policy=admitted.policy
        )
    except ThreadNotFound:
        raise OpenAIError(404, f"Conversation with id {cid!r} not found.", param="conversation") from None
    except RunRejected as e:  # not with "enqueue"; kept so every outcome of run() has its answer
        raise OpenAIError(409, str(e), param="conversation") from None
    except QueueAtLimit as e:
        raise queue_full(e, tenant, state) from None
    return placed.job_id, model
