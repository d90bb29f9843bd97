"""JSON Schema normalisation for llama-cpp-py-sync's GBNF converter: pure, no model."""

from __future__ import annotations

import copy
import enum
from typing import Any, Literal, Optional

import pytest
from llama_cpp_py_sync.constraints import response_format_to_grammar
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from memstream.localllm.schema import SchemaError, normalise
from memstream.processors.consolidation import prompts as consolidation_prompts
from memstream.processors.query import prompts as query_prompts
from memstream.processors.write import prompts as write_prompts


def grammar(schema: dict[str, Any]) -> str:
    """What the server compiles: the converter must accept every normalised schema."""
    out = response_format_to_grammar({"type": "json_schema", "json_schema": {"schema": normalise(schema)}})
    assert out and "root ::=" in out
    return out


def test_ref_to_defs_and_definitions_is_inlined_with_its_siblings() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A", "description": "kept"},
            "b": {"$ref": "#/definitions/B"},
        },
        "required": ["a", "b"],
        "$defs": {"A": {"type": "string", "enum": ["x", "y"]}},
        "definitions": {"B": {"type": "integer"}},
    }
    out = normalise(schema)
    assert out["properties"]["a"] == {"type": "string", "enum": ["x", "y"], "description": "kept"}
    assert out["properties"]["b"] == {"type": "integer"}
    assert "$defs" not in out and "definitions" not in out
    grammar(schema)


def test_a_reference_used_twice_is_inlined_twice_but_recursion_is_an_error() -> None:
    node = {"type": "object", "properties": {"v": {"type": "string"}}}
    twice = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/N"}, "y": {"$ref": "#/$defs/N"}},
        "$defs": {"N": node},
    }
    assert normalise(twice)["properties"]["x"] == normalise(twice)["properties"]["y"] == node

    recursive = {
        "$ref": "#/$defs/Tree",
        "$defs": {
            "Tree": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}}
        },
    }
    with pytest.raises(SchemaError, match="recursive"):
        normalise(recursive)
    with pytest.raises(SchemaError, match="points at nothing"):
        normalise({"$ref": "#/$defs/Missing"})
    with pytest.raises(SchemaError, match="local references"):
        normalise({"$ref": "https://example.com/schema.json"})


def test_single_allof_is_merged_and_longer_ones_are_refused() -> None:
    schema = {
        "type": "object",
        "properties": {"c": {"allOf": [{"$ref": "#/$defs/C"}], "description": "colour"}},
        "$defs": {"C": {"type": "string", "enum": ["red"]}},
    }
    assert normalise(schema)["properties"]["c"] == {"type": "string", "enum": ["red"], "description": "colour"}
    grammar(schema)
    with pytest.raises(SchemaError, match="allOf"):
        normalise({"allOf": [{"type": "string"}, {"maxLength": 3}]})
    with pytest.raises(SchemaError, match="conflicts"):
        normalise({"type": "integer", "allOf": [{"type": "string"}]})


def test_keywords_that_only_narrow_values_are_dropped() -> None:
    schema = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time", "pattern": "^2", "minLength": 2, "maxLength": 30},
            "n": {"type": "integer", "minimum": 0, "maximum": 9, "exclusiveMinimum": -1, "multipleOf": 1},
            "x": {"type": "number", "exclusiveMaximum": 1.5, "minLength": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 3},
        },
        "required": ["when", "n"],
        "additionalProperties": False,
        "minProperties": 1,
        "title": "T",
        "description": "harmless",
    }
    original = copy.deepcopy(schema)
    out = normalise(schema)
    assert schema == original  # not mutated
    # String lengths stay: the converter turns them into bounded repetitions.
    assert out["properties"]["when"] == {"type": "string", "minLength": 2, "maxLength": 30}
    assert out["properties"]["n"] == {"type": "integer"}
    assert out["properties"]["x"] == {"type": "number"}
    assert out["properties"]["tags"] == {"type": "array", "items": {"type": "string"}, "maxItems": 3}
    assert "additionalProperties" not in out and "minProperties" not in out
    assert out["title"] == "T" and out["description"] == "harmless"
    grammar(schema)


def test_additional_properties_without_properties_becomes_any_object() -> None:
    out = normalise({"type": "object", "additionalProperties": {"type": "integer"}})
    assert out == {"type": "object", "additionalProperties": True}
    grammar({"type": "object", "additionalProperties": {"type": "integer"}})


def test_a_type_list_keeps_string_lengths_on_the_string_branch_only() -> None:
    out = normalise({"type": ["string", "null"], "maxLength": 5})
    assert out == {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]}
    grammar({"type": ["string", "null"], "maxLength": 5})
    assert normalise({"type": ["string"], "maxLength": 5}) == {"type": "string", "maxLength": 5}


def test_boolean_schemas() -> None:
    assert normalise({"type": "object", "properties": {"any": True}})["properties"]["any"] == {}
    with pytest.raises(SchemaError, match="accepts nothing"):
        normalise({"type": "object", "properties": {"never": False}})
    with pytest.raises(SchemaError):
        normalise([])  # type: ignore[arg-type]


class Colour(str, enum.Enum):
    red = "red"
    blue = "blue"


class Address(BaseModel):
    city: str = Field(min_length=1, description="the city")
    postcode: Optional[str] = Field(default=None, pattern=r"^\d+$")


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, le=150)
    colour: Colour
    home: Address
    previous: list[Address] = []
    nickname: Optional[str] = None
    scores: dict[str, int] = {}
    kind: Literal["human", "robot"] = "human"


def test_pydantic_and_openai_strict_schemas_convert() -> None:
    with pytest.raises(ValueError, match="Unsupported JSON Schema"):  # why normalise exists
        response_format_to_grammar({"type": "json_schema", "json_schema": {"schema": Person.model_json_schema()}})
    grammar(Person.model_json_schema())
    grammar(to_strict_json_schema(Person))  # what client.chat.completions.parse(response_format=Person) sends


def test_every_project_schema_converts() -> None:
    """The schemas memstream's stages send (each stage's prompts module, bench/judge.py) and the pydantic
    models that read their output."""
    from memstream.bench import judge
    from memstream.processors.consolidation import consolidate
    from memstream.processors.query import plan
    from memstream.processors.write import extract

    schemas = [
        write_prompts.extract_schema(["t1", "t2", "t3"], 2, max_cards=6),
        write_prompts.extract_schema(None, 2, max_cards=6),  # the stable one (MEMSTREAM_LLM_STABLE_SCHEMAS)
        query_prompts.plan_schema(),
        consolidation_prompts.consolidate_schema(["A", "B"], list(consolidate.ACTIONS)),
        judge._schema("label", ["CORRECT", "WRONG"]),
        judge._schema("verdict", ["yes", "no"]),
    ]
    models: list[type[BaseModel]] = [
        extract._LlmOutput,
        consolidate._LlmDecisions,
        plan._LlmPlan,
        judge._Label,
        judge._Verdict,
    ]
    for schema in schemas + [m.model_json_schema() for m in models]:
        grammar(schema)
