"""The bounds on the work a caller's schema may ask for (toolq/wire/schema_bounds.py), as every door
meets them: through the protocol's request model, with the field path in the refusal."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from toolq.wire.protocol import JobRequest, ResponseFormat
from toolq.wire.re2_validator import re2_validator
from toolq.wire.schema_bounds import SchemaLimits, SchemaTooLarge, check_schema_bounds, schema_limits

USER = {"role": "user", "content": "hi"}


def request_with(parameters: dict) -> dict:
    return {"messages": [USER], "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}]}


def obj(**properties: dict) -> dict:
    return {"type": "object", "properties": properties}


def refusal(parameters: dict) -> str:
    with pytest.raises(ValidationError) as e:
        JobRequest.model_validate(request_with(parameters))
    return " | ".join(err["msg"] for err in e.value.errors())


def test_a_huge_string_length_is_refused_naming_its_field_and_setting():
    msg = refusal(obj(x={"type": "string", "minLength": 300_000_000}))
    assert "parameters.properties.x.minLength is 300000000, above the limit of 1000 (TOOLQ_SCHEMA_MAX_REPEAT)" in msg


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (obj(x={"type": "string", "maxLength": 1001}), "properties.x.maxLength"),
        (obj(x={"type": "array", "minItems": 5000, "items": {"type": "integer"}}), "properties.x.minItems"),
        (obj(x={"type": "array", "items": {"type": "string", "maxLength": 10**9}}), "properties.x.items.maxLength"),
        (obj(x={"type": "string", "pattern": "^a{100000}$"}), "properties.x.pattern ({100000})"),
        (obj(x={"type": "string", "pattern": "^a{2,5000}$"}), "properties.x.pattern ({2,5000})"),
    ],
)
def test_each_count_the_converter_writes_out_is_bounded(schema, where):
    assert f"parameters.{where} is" in refusal(schema)


def test_counts_at_the_bound_are_admitted():
    props = {f"p{i}": {"type": "string", "maxLength": 1000} for i in range(8)}
    JobRequest.model_validate(request_with(obj(**props)))


def test_the_sum_over_one_schema_is_bounded_too():
    props = {f"p{i}": {"type": "string", "maxLength": 1000} for i in range(9)}
    msg = refusal(obj(**props))
    assert "parameters.properties.p8.maxLength brings the schema's repetitions" in msg
    assert "TOOLQ_SCHEMA_MAX_REPEAT_TOTAL" in msg


def test_enum_size_nesting_refs_and_pattern_length_are_bounded():
    assert "parameters.properties.x.enum is 501 values, above the limit of 500 (TOOLQ_SCHEMA_MAX_ENUM)" in refusal(
        obj(x={"enum": list(range(501))})
    )
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = obj(a=deep)
    assert "nests deeper than the limit of 64 levels (TOOLQ_SCHEMA_MAX_DEPTH)" in refusal(deep)
    refs = {f"p{i}": {"$ref": "#/$defs/t"} for i in range(257)}
    msg = refusal({**obj(**refs), "$defs": {"t": {"type": "integer"}}})
    assert "parameters.properties.p256.$ref is 257 $refs in all, above the limit of 256" in msg
    assert "TOOLQ_SCHEMA_MAX_PATTERN" in refusal(obj(x={"type": "string", "pattern": "a" * 1001}))


def test_a_pattern_re2_cannot_run_is_refused():
    msg = refusal(obj(x={"type": "string", "pattern": "^(?=a)a$"}))
    assert "parameters.properties.x.pattern is not a pattern RE2 can run" in msg
    msg = refusal({"type": "object", "patternProperties": {"(a)\\1": {"type": "string"}}})
    assert "parameters.patternProperties['(a)\\\\1'] is not a pattern RE2 can run" in msg
    msg = refusal({"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False})
    assert "parameters.unevaluatedProperties cannot be checked beside patternProperties" in msg


def test_values_are_data_not_keywords():
    JobRequest.model_validate(request_with(obj(x={"const": {"minLength": 10**9}, "default": {"maxItems": 10**9}})))


def test_a_response_format_schema_meets_the_same_bounds():
    with pytest.raises(ValidationError) as e:
        ResponseFormat(type="json_schema", json_schema=obj(x={"type": "string", "minLength": 10**8}))
    assert "json_schema.properties.x.minLength is 100000000" in e.value.errors()[0]["msg"]


def test_the_bounds_are_settings(monkeypatch):
    monkeypatch.setenv("TOOLQ_SCHEMA_MAX_REPEAT", "50")
    schema_limits.cache_clear()
    try:
        with pytest.raises(SchemaTooLarge, match="above the limit of 50"):
            check_schema_bounds(obj(x={"type": "string", "maxLength": 51}))
    finally:
        schema_limits.cache_clear()
    check_schema_bounds(obj(x={"type": "string", "maxLength": 51}), SchemaLimits(max_repeat=51))


def test_a_catastrophic_pattern_is_searched_in_linear_time():
    # ^(a+)+$ on "aaa…ab" takes Python's re exponential time; RE2 answers at once
    validator = re2_validator(obj(x={"type": "string", "pattern": "^(a+)+$"}))
    started = time.monotonic()
    errors = list(validator.iter_errors({"x": "a" * 5000 + "b"}))
    assert time.monotonic() - started < 1.0
    assert len(errors) == 1 and "does not match" in errors[0].message
    assert not list(validator.iter_errors({"x": "aaaa"}))


def test_pattern_properties_beside_additional_properties_match_jsonschema():
    schema = {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x_": {"type": "integer"}}}
    validator = re2_validator({**schema, "additionalProperties": False})
    assert not list(validator.iter_errors({"a": 1, "x_1": 2}))
    assert [e.message for e in validator.iter_errors({"x_1": "no"})] == ["'no' is not of type 'integer'"]
    assert "'y' do not match any of the regexes: ^x_" in [e.message for e in validator.iter_errors({"y": 1})]
    extra = re2_validator({**schema, "additionalProperties": {"type": "string"}})
    assert [e.message for e in extra.iter_errors({"y": 1})] == ["1 is not of type 'string'"]


def test_the_regex_format_is_checked_with_re2():
    validator = re2_validator(obj(x={"type": "string", "format": "regex"}))
    assert not list(validator.iter_errors({"x": "^a+$"}))
    assert list(validator.iter_errors({"x": "(?=a)"}))
