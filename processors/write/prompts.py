"""The extraction prompt and its output schema (stage 4), kept apart from the logic that uses them."""

from __future__ import annotations

from datetime import date
from typing import Sequence

from memstream.processors.structured import one_of_schema, strings_schema, text_schema
from memstream.schemas import CompressedTurn

CARD_TYPES = ["fact", "event", "preference", "state", "plan", "interaction", "assistant_output"]

EXTRACT_SYSTEM = """You turn a piece of conversation into long-term memory.
Return JSON only, following the schema.
- scenes: one per topic (T1, T2, ... as marked): a one-sentence summary of what happens, the
  participants, scene_triggers (key elements of the scene) and horizon_triggers (future situations
  in which this scene will matter).
- cards: atomic, self-contained statements. The subject is always a name, never a pronoun. Each card
  cites the ids of the turns it comes from in turn_ids (ids shown in square brackets). Copy any
  time expression the card relies on into time_phrase (e.g. "yesterday", "last May").
  entity_triggers: precise names in the card. bridge_triggers: situations where the card becomes
  relevant in another context (e.g. "allergic to seafood" -> "team dinner").
- profiles: stable traits, preferences, relationships and constraints per speaker."""


def topic_key(index: int) -> str:
    return f"T{index + 1}"


def extract_user(topics: Sequence[tuple[str, Sequence[CompressedTurn]]]) -> str:
    """The flush as the LLM reads it: its topic segments, each turn with its id and speaker, and the
    date above the turns of each day: once per day, not a timestamp on every turn (prompt tokens are
    the larger part of an extraction's cost). The cards' times come from the turns' own timestamps;
    the LLM only copies the time phrases."""
    lines = []
    day: date | None = None
    for i, (label, turns) in enumerate(topics):
        lines.append(f"Topic {topic_key(i)} ({label}):")
        for ct in turns:
            t = ct.turn
            if t.event_time.date() != day:
                day = t.event_time.date()
                lines.append(f"{day:%A %Y-%m-%d}:")
            captions = f" (shares image: {'; '.join(t.image_captions)})" if t.image_captions else ""
            lines.append(f"[{t.turn_id}] {t.speaker}: {ct.compressed_text}{captions}")
    return "Conversation:\n" + "\n".join(lines) + "\n\nExtract the memory JSON."


STABLE_MAX_SCENES = 16  # a stable schema's bound on scenes (a flush's topics; more are left unused)


def extract_schema(turn_ids: Sequence[str] | None, topics: int, max_cards: int = 24) -> dict:
    """The extraction output schema. Its bounds keep a constrained decoder's output finite, so a
    small model cannot run past its token limit (truncated JSON) listing ever more items.

    With ``turn_ids``, provenance and topics are enums of this flush's turn ids and topic keys: a
    constrained decoder cannot cite a turn that is not there, but the schema differs per flush.
    Without (``None``), the schema is the same for every call: a provider that caches the schema with
    the prompt's prefix (OpenAI puts it before the system message) reuses the fixed part of every
    extraction; ids not in the flush are dropped when the output is read."""
    if turn_ids is None:
        topic: dict = text_schema(8, 1)
        scenes_max = STABLE_MAX_SCENES
        cited: dict = {**strings_schema(4, 128), "minItems": 1}  # ids are at most 128 characters (schemas/base.py)
    else:
        topic_keys = [topic_key(i) for i in range(topics)]
        topic = {"type": "string", "enum": topic_keys}
        scenes_max = len(topic_keys)
        cited = one_of_schema(turn_ids, 4)
    return {
        "type": "object",
        "properties": {
            "scenes": {
                "type": "array",
                "minItems": 1,
                "maxItems": scenes_max,
                "items": {
                    "type": "object",
                    "properties": {
                        "topic": topic,
                        "summary": text_schema(240, 12),
                        "participants": strings_schema(6, 60),
                        "scene_triggers": strings_schema(5, 60),
                        "horizon_triggers": strings_schema(3, 80),
                    },
                    "required": ["topic", "summary", "participants", "scene_triggers", "horizon_triggers"],
                },
            },
            "cards": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_cards,
                "items": {
                    "type": "object",
                    "properties": {
                        "subject": text_schema(60, 1),
                        "type": {"type": "string", "enum": CARD_TYPES},
                        "content": text_schema(240, 8),
                        "time_phrase": text_schema(40),
                        "turn_ids": cited,
                        "atomic": {"type": "boolean"},
                        "entity_triggers": strings_schema(5, 60),
                        "bridge_triggers": strings_schema(3, 80),
                    },
                    "required": ["subject", "type", "content", "turn_ids", "entity_triggers", "bridge_triggers"],
                },
            },
            "profiles": {
                "type": "array",
                "maxItems": 4,
                "items": {
                    "type": "object",
                    "properties": {
                        "speaker": text_schema(60, 1),
                        "traits": strings_schema(4, 80),
                        "preferences": strings_schema(4, 80),
                        "relationships": strings_schema(4, 80),
                        "constraints": strings_schema(4, 80),
                    },
                    "required": ["speaker"],
                },
            },
        },
        "required": ["scenes", "cards", "profiles"],
    }
