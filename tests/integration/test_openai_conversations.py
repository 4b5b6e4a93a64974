"""The Conversations API and ``conversation`` on /v1/responses, with the official openai package
against a real gateway, Redis and a scripted worker: a conversation is a toolq thread."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.settings import GatewaySettings
from tests.integration.gateway_support import private_redis, served
from tests.support.workers import write_rules

KEYS = {"oa-key": "acme", "other-key": "globex"}
END = r"\s*<\|im_end\|>\s*<\|im_start\|>assistant\s*\Z"
RULES = [
    (r"My name is Ada" + END, "Nice to meet you, Ada."),
    (r"(?s)My name is Ada.*What is my name\?" + END, "Your name is Ada."),
    (r"What is my name\?" + END, "I do not know your name."),
    (r"(?s)\A.*", "ok"),
]


@pytest.fixture(scope="module")
def gateway():
    with private_redis() as url:
        settings = GatewaySettings(redis_url=url, api_keys=KEYS, fleet_cache_s=0)
        with served(url, settings, script=write_rules(RULES)) as gw:
            yield gw


@pytest.fixture
def client(gateway):
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="oa-key", max_retries=0, timeout=30) as c:
        yield c


def test_create_retrieve_update_delete(client, gateway):
    conv = client.conversations.create(
        metadata={"topic": "demo"},
        items=[{"type": "message", "role": "user", "content": "Hello!"}],
    )
    assert conv.object == "conversation" and conv.metadata == {"topic": "demo"} and conv.created_at > 0
    assert client.conversations.retrieve(conv.id).id == conv.id
    updated = client.conversations.update(conv.id, metadata={"topic": "other"})
    assert updated.metadata == {"topic": "other"}
    # the same conversation is a toolq thread
    thread = httpx.get(f"{gateway.url}/v1/threads/{conv.id}", headers={"Authorization": "Bearer oa-key"}).json()
    assert thread["metadata"] == {"topic": "other"} and thread["messages"]["data"][0]["message"]["content"] == "Hello!"

    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="other-key", max_retries=0) as other:
        with pytest.raises(openai.NotFoundError):
            other.conversations.retrieve(conv.id)

    deleted = client.conversations.delete(conv.id)
    assert deleted.deleted and deleted.id == conv.id and deleted.object == "conversation.deleted"
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)


def test_items_list_create_retrieve_delete_and_paging(client):
    conv = client.conversations.create()
    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "user", "content": "one"},
            {"type": "message", "role": "assistant", "content": "two"},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q": "x"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "found"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "three"}]},
        ],
    )
    kinds = [i.type for i in added.data]
    assert kinds == ["message", "message", "function_call", "function_call_output", "message"]
    # newest first by default, as OpenAI lists them; the SDK pages on with ``after``
    listed = list(client.conversations.items.list(conv.id, limit=2))
    assert [i.id for i in listed] == [i.id for i in reversed(added.data)]
    page = client.conversations.items.list(conv.id, limit=2, order="asc")
    assert page.has_more and [i.id for i in page.data] == [i.id for i in added.data[:2]]

    call = client.conversations.items.retrieve(added.data[2].id, conversation_id=conv.id)
    assert call.type == "function_call" and call.name == "lookup" and call.call_id == "call_1"
    text = client.conversations.items.retrieve(added.data[4].id, conversation_id=conv.id)
    assert text.type == "message" and text.content[0].text == "three"

    after = client.conversations.items.delete(added.data[0].id, conversation_id=conv.id)
    assert after.id == conv.id
    left = list(client.conversations.items.list(conv.id, order="asc"))
    assert [i.id for i in left] == [i.id for i in added.data[1:]]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)


def test_responses_on_a_conversation_remember_what_was_said(client):
    conv = client.conversations.create()
    first = client.responses.create(model="scripted", input="My name is Ada", conversation=conv.id)
    assert first.output_text == "Nice to meet you, Ada." and first.conversation.id == conv.id
    second = client.responses.create(
        model="scripted", input="What is my name?", conversation={"id": conv.id}, instructions="Be brief."
    )
    assert second.output_text == "Your name is Ada."
    items = list(client.conversations.items.list(conv.id, order="asc"))
    texts = [i.content[0].text for i in items]
    # the inputs and outputs, never the instructions
    assert texts == ["My name is Ada", "Nice to meet you, Ada.", "What is my name?", "Your name is Ada."]
    assert [i.role for i in items] == ["user", "assistant", "user", "assistant"]

    fresh = client.responses.create(model="scripted", input="What is my name?")
    assert fresh.output_text == "I do not know your name."


def test_bad_input_is_a_400_naming_the_field(client):
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as e:
        client.conversations.create(metadata={f"k{i}": "v" for i in range(17)})
    assert e.value.body["param"] == "metadata"
    with pytest.raises(openai.BadRequestError) as e:
        client.conversations.items.create(conv.id, items=[{"type": "reasoning", "summary": []}])
    assert e.value.body["param"] == "items[0]"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="scripted", input="hi", conversation=conv.id, previous_response_id="resp_x")
    assert "conversation" in e.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="scripted", input="hi", conversation="thread_missing")
    with pytest.raises(openai.BadRequestError) as e:
        client.conversations.items.list(conv.id, after="msg_missing")
    assert e.value.body["param"] == "after"
