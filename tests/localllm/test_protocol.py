"""OpenAI request bodies to generation settings and completions to response bodies: pure, no model."""

from __future__ import annotations

from typing import Any

import pytest

from memstream.localllm.protocol import (
    ApiError,
    Completion,
    Sampling,
    chat_response,
    context_length_error,
    error_body,
    models_response,
    parse_chat_request,
    response_format_grammar,
)

USER = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def parse(**body: Any) -> Sampling:
    return parse_chat_request({"messages": USER, **body}).sampling


def rejected(body: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_chat_request(body)
    assert caught.value.status == 400
    return caught.value


def test_defaults_are_llama_cpp_python_servers() -> None:
    request = parse_chat_request({"model": "m", "messages": USER})
    assert request.model == "m"
    assert request.messages == USER
    assert request.sampling == Sampling(max_tokens=None, temperature=0.8, top_p=0.95, top_k=40, min_p=0.05)


def test_sampling_fields() -> None:
    sampling = parse(
        max_tokens=50, temperature=0, top_p=0.5, seed=7, stop=["\n", ""], top_k=1, min_p=0.0, repeat_penalty=1.0
    )
    assert sampling == Sampling(
        max_tokens=50, temperature=0.0, top_p=0.5, top_k=1, min_p=0.0, repeat_penalty=1.0, seed=7, stop=("\n",)
    )
    assert parse(max_tokens=50, max_completion_tokens=20).max_tokens == 20  # the newer name wins
    assert parse(stop="END").stop == ("END",)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 0),
        ("max_tokens", 1.5),
        ("max_completion_tokens", "9"),
        ("temperature", -0.1),
        ("temperature", 2.5),
        ("temperature", True),
        ("top_p", 1.5),
        ("seed", "x"),
        ("stop", [1]),
        ("model", 3),
    ],
)
def test_bad_fields_name_themselves(field: str, value: Any) -> None:
    assert rejected({"messages": USER, field: value}).param == field


@pytest.mark.parametrize(
    "body",
    [
        {"stream": True},
        {"n": 2},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "required"},
        {"logprobs": True},
        {"logit_bias": {"1": 5}},
        {"frequency_penalty": 0.5},
    ],
)
def test_unsupported_features_are_refused_not_ignored(body: dict[str, Any]) -> None:
    assert "not supported" in rejected({"messages": USER, **body}).message


def test_harmless_openai_fields_are_accepted() -> None:
    parse(stream=False, n=1, user="u", presence_penalty=0, tool_choice="none", store=False, metadata={})


def test_messages() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    request = parse_chat_request(
        {"messages": [{"role": "system", "content": parts}, {"role": "assistant", "content": None}]}
    )
    assert request.messages == [{"role": "system", "content": "ab"}, {"role": "assistant", "content": ""}]
    assert rejected({"messages": []}).param == "messages"
    assert rejected({}).param == "messages"
    assert rejected({"messages": [{"content": "x"}]}).param == "messages[0].role"
    assert rejected({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).param == "messages[0].content"
    assert rejected({"messages": [{"role": "user", "content": 5}]}).param == "messages[0].content"
    assert rejected([1]).param is None


def test_response_format_in_all_three_forms() -> None:
    assert response_format_grammar(None) is None
    assert response_format_grammar({"type": "text"}) is None
    openai_form = response_format_grammar(
        {"type": "json_schema", "json_schema": {"name": "out", "schema": SCHEMA, "strict": True}}
    )
    llama_form = response_format_grammar({"type": "json_object", "schema": SCHEMA})
    any_object = response_format_grammar({"type": "json_object"})
    assert openai_form == llama_form
    assert openai_form and any_object and openai_form != any_object
    assert '"\\"a\\""' in openai_form  # the property name is in the grammar
    assert parse(response_format={"type": "json_object", "schema": SCHEMA}).grammar == openai_form


def test_bad_response_formats_are_400s() -> None:
    for response_format in [
        {"type": "xml"},
        "json",
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"name": "x"}},
        {"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}},  # recursive
        {"type": "json_object", "schema": {"type": "object", "not": {"type": "null"}}},  # the converter's refusal
    ]:
        error = rejected({"messages": USER, "response_format": response_format})
        assert error.param == "response_format", response_format


def test_response_body() -> None:
    body = chat_response(Completion("hello", 12, 3, "length"), model="m", created=5)
    assert body["object"] == "chat.completion" and body["model"] == "m" and body["created"] == 5
    assert body["id"].startswith("chatcmpl-")
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "hello"}, "logprobs": None, "finish_reason": "length"}
    ]
    assert body["usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


def test_models_and_error_bodies() -> None:
    assert models_response("smol") == {
        "object": "list",
        "data": [{"id": "smol", "object": "model", "created": 0, "owned_by": "memstream"}],
    }
    assert error_body("bad", param="x") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "x", "code": None}
    }
    error = context_length_error(9000, 8192)
    assert error.status == 400 and error.code == "context_length_exceeded" and error.param == "messages"
    assert "8192" in error.message and "9000" in error.message
