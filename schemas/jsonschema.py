"""The wire contract as JSON Schema (Draft 2020-12): one file per topic payload, generated from the
pydantic models, plus ``index.json`` (topic -> payload kinds -> file, keys, schema version).

The schemas describe what a producer must send for memstream to accept a message, so they are made
from the models' *validation* schema (fields with a default may be left out), tightened where JSON
Schema can say what the models check in code:

- ``kind`` is required: a topic carrying several payloads is demultiplexed by it (without it, a
  message is read as the topic's main payload), and memstream always writes it.
- timestamps must carry their offset (RFC 3339 ``date-time``, also as a ``pattern`` for validators
  that treat ``format`` as an annotation only); the models would take a naive time as UTC.
- the cross-field rules of ``Forget`` and ``ConsolidateCommand`` (``if``/``then``).

Every ``Payload.to_bytes()`` validates against its schema (tests/schemas/test_json_schemas.py).
Checks that depend on a worker's settings (the hard cap on a turn's length) are not in the schemas.

Regenerate after changing a model: ``python -m memstream.schemas.jsonschema``; ``--check`` only
compares and exits 1 listing the files that differ (CI and the tests run it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .base import ID_PATTERN, SCHEMA_VERSION, Payload
from .topics import COMPACTED_TOPICS, TOPIC_PAYLOADS

DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_OUT = Path(__file__).resolve().parent / "json"
INDEX = "index.json"
GENERATOR = "python -m memstream.schemas.jsonschema"

# RFC 3339 date-time with a mandatory offset; fractions of a second up to nanoseconds.
DATETIME_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+\-][0-9]{2}:[0-9]{2})$"

CONVERSATION_KEY = "tenant_id/conversation_id"
# The Kafka key of each payload on each topic (what memstream itself writes; a producer must use it,
# it decides the partition and so the order). Anything not listed is keyed by conversation.
KEYS: dict[tuple[str, str], str] = {
    ("turns", "forget"): "tenant_id/conversation_id, or tenant_id/* for a copy of a broadcast forget (sent to "
    "partition `part`)",
    ("turns.compressed", "forget"): "as on turns",
    ("segments", "forget"): "as on turns",
    ("stm.flush", "forget"): "as on turns",
    ("cards", "forget"): "as on turns",
    ("control", "consolidate"): "tenant_id/conversation_id; without a conversation tenant_id/* (or */* for every "
    "tenant), one copy per partition",
    ("control", "forget"): "tenant_id/conversation_id; without a conversation tenant_id/*, one copy per partition "
    "(each names its `part` of `parts`)",
    ("queries", "read"): "tenant_id/conversation_id, or tenant_id/* for a read of the whole tenant",
    ("replies", "reply"): "correlation_id",
    ("replies", "read_reply"): "correlation_id",
    ("replies", "forget_reply"): "the forget's key: tenant_id/conversation_id or tenant_id/*",
    ("dlq", "dead_letter"): "the key of the message that failed, as it came",
    ("audit", "forget_audit"): "forget_id/part (the topic is compacted: the latest record per key stays)",
    ("import.progress", "import_progress"): "tenant_id/counter (compacted: the latest record per key stays)",
}


def payload_kind(model: type[Payload]) -> str:
    kind = model.model_fields["kind"].default
    assert isinstance(kind, str), f"{model.__name__} has no kind"
    return kind


def schema_file(model: type[Payload]) -> str:
    return f"{payload_kind(model)}.schema.json"


def schema_id(model: type[Payload]) -> str:
    return f"urn:memstream:schema:v{SCHEMA_VERSION}:{payload_kind(model)}"


def payload_topics() -> dict[type[Payload], list[str]]:
    """Each payload model and the topics that carry it, in the order of ``TOPIC_PAYLOADS``."""
    out: dict[type[Payload], list[str]] = {}
    for topic, models in TOPIC_PAYLOADS.items():
        for model in models:
            out.setdefault(model, []).append(topic)
    return out


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every object (sub)schema of a schema, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def _tighten(schema: dict[str, Any]) -> None:
    for node in list(_nodes(schema)):
        properties = node.get("properties")
        if node.get("type") == "object" and isinstance(properties, dict):
            for prop in properties.values():
                prop.pop("title", None)  # "Tenant Id" for tenant_id: noise
            if "const" in properties.get("kind", {}):
                node["required"] = ["kind", *(r for r in node.get("required", []) if r != "kind")]
        if node.get("format") == "date-time":
            node["pattern"] = DATETIME_PATTERN


def _forget(schema: dict[str, Any]) -> None:
    # Forget._turns_need_a_conversation: turn ids need a conversation; each is a string of <= 128.
    schema["properties"]["turn_ids"]["items"]["maxLength"] = 128
    schema["allOf"] = [
        {
            "if": {"properties": {"turn_ids": {"type": "array", "minItems": 1}}, "required": ["turn_ids"]},
            "then": {"properties": {"conversation_id": {"type": "string"}}, "required": ["conversation_id"]},
        }
    ]


def _consolidate_command(schema: dict[str, Any]) -> None:
    # ConsolidateCommand._conversation_needs_tenant: a conversation is named within a tenant.
    schema["allOf"] = [
        {
            "if": {"properties": {"conversation_id": {"type": "string"}}, "required": ["conversation_id"]},
            "then": {"properties": {"tenant_id": {"type": "string"}}, "required": ["tenant_id"]},
        }
    ]


# What a model checks in a validator, said in JSON Schema (by class name: no import cycle, one place).
MODEL_RULES: dict[str, Callable[[dict[str, Any]], None]] = {
    "Forget": _forget,
    "ConsolidateCommand": _consolidate_command,
}


def topic_description(model: type[Payload], topics: list[str]) -> str:
    carried = []
    for topic in topics:
        main = TOPIC_PAYLOADS[topic][0] is model and len(TOPIC_PAYLOADS[topic]) > 1
        carried.append(f"<prefix>.{topic}" + (" (its main payload)" if main else ""))
    keys = sorted({KEYS.get((t, payload_kind(model)), CONVERSATION_KEY) for t in topics})
    return f"Carried on {', '.join(carried)}. Kafka key: {'; '.join(keys)}."


def payload_schema(model: type[Payload], topics: list[str]) -> dict[str, Any]:
    """The JSON Schema of one payload model, as committed."""
    schema = model.model_json_schema(mode="validation")
    _tighten(schema)
    rule = MODEL_RULES.get(model.__name__)
    if rule:
        rule(schema)
    doc = schema.get("description")
    where = topic_description(model, topics)
    return {
        "$schema": DIALECT,
        "$id": schema_id(model),
        "$comment": f"Generated from memstream.schemas.{model.__name__} by {GENERATOR}; do not edit.",
        **schema,
        "title": model.__name__,
        "description": f"{doc}\n\n{where}" if doc else where,
    }


def index(payloads: dict[type[Payload], list[str]]) -> dict[str, Any]:
    return {
        "$comment": f"Generated by {GENERATOR}; do not edit. Topic names are <prefix>.<topic> "
        "(MEMSTREAM_TOPIC_PREFIX, default 'memory'). Values are UTF-8 JSON objects; no Kafka headers are used.",
        "schema_version": SCHEMA_VERSION,
        "dialect": DIALECT,
        "id_pattern": ID_PATTERN,
        "datetime_pattern": DATETIME_PATTERN,
        "topics": {
            topic: {
                "main": payload_kind(models[0]),
                "compacted": topic in COMPACTED_TOPICS,
                "payloads": {
                    payload_kind(m): {
                        "file": schema_file(m),
                        "key": KEYS.get((topic, payload_kind(m)), CONVERSATION_KEY),
                    }
                    for m in models
                },
            }
            for topic, models in TOPIC_PAYLOADS.items()
        },
        "payloads": {
            payload_kind(m): {"title": m.__name__, "file": schema_file(m), "$id": schema_id(m), "topics": topics}
            for m, topics in payloads.items()
        },
    }


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def generate() -> dict[str, str]:
    """File name -> content of every file of the contract."""
    payloads = payload_topics()
    files = {schema_file(m): render(payload_schema(m, topics)) for m, topics in payloads.items()}
    files[INDEX] = render(index(payloads))
    return dict(sorted(files.items()))


def differences(out: Path) -> list[str]:
    """The files of ``out`` that are missing or stale, and ``*.schema.json`` files no model makes."""
    files = generate()
    wrong = [name for name, text in files.items() if not (out / name).is_file() or (out / name).read_text() != text]
    extra = [p.name for p in out.glob("*.schema.json") if p.name not in files] if out.is_dir() else []
    return sorted(wrong + extra)


def write(out: Path) -> list[str]:
    """Writes what differs (and removes generated-looking files no model makes); returns their names."""
    out.mkdir(parents=True, exist_ok=True)
    files = generate()
    changed = differences(out)
    for name in changed:
        if name in files:
            (out / name).write_text(files[name])
        else:
            (out / name).unlink()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=GENERATOR, description="Write the JSON Schemas of every topic payload.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder (default {DEFAULT_OUT})")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 listing the files that differ")
    args = parser.parse_args(argv)
    if args.check:
        stale = differences(args.out)
        for name in stale:
            print(f"differs: {args.out / name}", file=sys.stderr)
        if stale:
            print(f"{len(stale)} file(s) differ from the models: run {GENERATOR}", file=sys.stderr)
            return 1
        print(f"{args.out}: {len(generate())} files up to date (schema version {SCHEMA_VERSION})")
        return 0
    changed = write(args.out)
    print(
        f"{args.out}: {len(changed)} of {len(generate())} file(s) written or removed (schema version {SCHEMA_VERSION})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
