import orjson
import pytest

from memstream.ports import LLMError, LlmResult
from memstream.processors.write import prompts
from memstream.processors.write.extract import ExtractiveExtractor, LlmExtractor, LlmUnavailable
from memstream.schemas import MemoryWrite
from tests.factories import flush_of, turn

FLUSH_TURNS = (
    turn("D1:1", "I went to the LGBTQ support group yesterday. It was so powerful.", speaker="Caroline"),
    turn("D1:2", "Wow! I love painting sunsets with my kids in Maine.", speaker="Melanie", seq=1),
)


def test_extractive_cards_have_subjects_times_provenance_and_triggers():
    write = ExtractiveExtractor().extract(flush_of(*FLUSH_TURNS))
    MemoryWrite.from_bytes(write.to_bytes())  # schema-valid
    assert write.mode == "extractive"
    by_text = {c.content: c for c in write.cards}
    group = by_text["Caroline: I went to the LGBTQ support group yesterday."]
    assert group.subject == "Caroline"
    assert group.provenance.turn_ids == ["D1:1"]
    assert group.event_time.date().isoformat() == "2023-05-07"
    assert group.time_phrase == "yesterday"
    assert "LGBTQ" in group.entity_triggers
    painting = by_text["Melanie: I love painting sunsets with my kids in Maine."]
    assert painting.type == "preference" and "Maine" in painting.entity_triggers
    assert write.profile_updates[0].speaker == "Melanie"
    assert write.scenes and set(write.scenes[0].turn_ids) == {"D1:1", "D1:2"}
    assert [t.turn_id for t in write.source_turns] == ["D1:1", "D1:2"]


def test_the_extractive_profile_holds_the_speakers_own_taste_only():
    write = ExtractiveExtractor().extract(
        flush_of(
            turn("D1:1", "What did it look like? It's like a cool form of self-expression.", speaker="Caroline"),
            turn("D1:2", "My sister loves jazz. I really enjoy hiking in the hills.", speaker="Melanie", seq=1),
        )
    )
    assert [(p.speaker, p.preferences) for p in write.profile_updates] == [
        ("Melanie", ["I really enjoy hiking in the hills."])
    ]
    assert write.profile_updates[0].source_turn_ids == ["D1:2"]


def test_extractive_mode_is_deterministic():
    flush = flush_of(*FLUSH_TURNS)
    a, b = ExtractiveExtractor().extract(flush), ExtractiveExtractor().extract(flush)
    assert [c.card_id for c in a.cards] == [c.card_id for c in b.cards]
    assert a.write_id == b.write_id


class ScriptedLLM:
    """A port double that replays canned completions: this tests validation and repair, not an LLM."""

    model = "scripted"

    def __init__(self, *outputs):
        self.outputs = list(outputs)
        self.calls = []
        self.schemas = []

    def complete(self, messages, *, json_schema=None, schema_name="output", max_tokens=None, timeout_s=None):
        self.calls.append(messages)
        self.schemas.append(json_schema)
        out = self.outputs.pop(0)
        if isinstance(out, Exception):
            raise out
        content = out if isinstance(out, str) else orjson.dumps(out).decode()
        return LlmResult(
            content=content,
            prompt_tokens=100,
            completion_tokens=50,
            model=self.model,
            data=out if isinstance(out, dict) else None,
        )


GOOD = {
    "scenes": [
        {
            "topic": "T1",
            "summary": "Caroline talks about a support group",
            "participants": ["Caroline"],
            "scene_triggers": ["support group"],
            "horizon_triggers": ["pride parade"],
        }
    ],
    "cards": [
        {
            "subject": "Caroline",
            "type": "event",
            "content": "Caroline went to an LGBTQ support group.",
            "time_phrase": "yesterday",
            "turn_ids": ["D1:1"],
            "entity_triggers": ["LGBTQ"],
            "bridge_triggers": ["community events"],
        }
    ],
    "profiles": [{"speaker": "Caroline", "traits": ["brave"]}],
}


def test_llm_extraction_valid_on_first_call():
    llm = ScriptedLLM(GOOD)
    write = LlmExtractor(llm).extract(flush_of(*FLUSH_TURNS))
    assert write.mode == "llm" and len(llm.calls) == 1
    [card] = write.cards
    assert card.event_time.date().isoformat() == "2023-05-07" and card.time_phrase == "yesterday"
    assert card.bridge_triggers == ["community events"]
    assert card.entity_triggers == ["Caroline", "LGBTQ"]  # the subject always is one
    assert write.scenes[0].horizon_triggers == ["pride parade"]
    assert write.costs[0].calls == 1 and write.costs[0].prompt_tokens == 100


def test_invalid_output_is_repaired_once():
    llm = ScriptedLLM("{broken", GOOD)
    extractor = LlmExtractor(llm)
    write = extractor.extract(flush_of(*FLUSH_TURNS))
    assert write.mode == "llm" and extractor.repairs == 1
    assert "invalid" in llm.calls[1][-1]["content"]
    assert write.costs[0].calls == 2


def test_cards_citing_unknown_turns_are_invalid_then_fall_back():
    bad = {**GOOD, "cards": [{**GOOD["cards"][0], "turn_ids": ["D9:9"]}]}
    llm = ScriptedLLM(bad, bad)
    extractor = LlmExtractor(llm)
    write = extractor.extract(flush_of(*FLUSH_TURNS))
    assert write.mode == "extractive_fallback" and extractor.fallbacks == 1
    assert write.costs[0].calls == 2
    assert all(c.provenance.turn_ids[0] in {"D1:1", "D1:2"} for c in write.cards)


def test_llm_errors_fall_back_without_retrying_the_endpoint():
    llm = ScriptedLLM(LLMError("connection refused"))
    write = LlmExtractor(llm).extract(flush_of(*FLUSH_TURNS))
    assert write.mode == "extractive_fallback" and len(llm.calls) == 1


def test_one_scene_per_topic_segment_and_cards_anchor_to_their_turns_scene():
    flush = flush_of(*FLUSH_TURNS, segment_ids=["seg1", "seg2"])
    assert len(flush.segments) == 2
    two = {
        **GOOD,
        "cards": GOOD["cards"]
        + [
            {
                "subject": "Melanie",
                "type": "preference",
                "content": "Melanie loves painting sunsets in Maine.",
                "turn_ids": ["D1:2"],
                "entity_triggers": ["Maine"],
                "bridge_triggers": ["art class"],
            }
        ],
    }
    write = LlmExtractor(ScriptedLLM(two)).extract(flush)
    assert write.mode == "llm" and len(write.scenes) == 2
    first, second = write.scenes
    assert first.summary == "Caroline talks about a support group" and first.turn_ids == ["D1:1"]
    assert second.turn_ids == ["D1:2"] and second.horizon_triggers == []  # no LLM scene: extractive one
    by_subject = {c.subject: c for c in write.cards}
    assert by_subject["Caroline"].provenance.scene_id == first.scene_id
    assert by_subject["Melanie"].provenance.scene_id == second.scene_id
    MemoryWrite.from_bytes(write.to_bytes())


def test_the_schema_of_a_call_allows_only_this_flushs_turn_ids_and_topics_and_bounds_the_output():
    llm = ScriptedLLM(GOOD)
    extractor = LlmExtractor(llm, max_cards=5, stable_schema=False)  # the local server's constrained decoder
    extractor.extract(flush_of(*FLUSH_TURNS, segment_ids=["seg1", "seg2"]))
    [schema] = llm.schemas
    card = schema["properties"]["cards"]
    assert card["maxItems"] == 5 and card["minItems"] == 1
    assert card["items"]["properties"]["turn_ids"]["items"]["enum"] == ["D1:1", "D1:2"]
    scenes = schema["properties"]["scenes"]
    assert scenes["items"]["properties"]["topic"]["enum"] == ["T1", "T2"] and scenes["maxItems"] == 2
    assert "Topic T2" in llm.calls[0][1]["content"]


def test_a_stable_schema_is_the_same_for_every_flush_and_still_bounds_the_output():
    llm = ScriptedLLM(GOOD, GOOD)
    extractor = LlmExtractor(llm, max_cards=5)  # the default: a provider's prompt cache keeps the schema
    extractor.extract(flush_of(*FLUSH_TURNS, segment_ids=["seg1", "seg2"]))
    extractor.extract(flush_of(*FLUSH_TURNS[:1]))  # one topic and one turn: enums would differ
    first, second = llm.schemas
    assert first == second
    card = first["properties"]["cards"]
    assert card["maxItems"] == 5 and "enum" not in card["items"]["properties"]["turn_ids"]["items"]
    assert card["items"]["properties"]["turn_ids"]["maxItems"] == 4
    assert first["properties"]["scenes"]["maxItems"] == prompts.STABLE_MAX_SCENES


def test_an_unreachable_llm_is_waited_for_when_asked_and_falls_back_otherwise():
    flush = flush_of(*FLUSH_TURNS)
    down = LLMError("Connection refused", "connection")
    with pytest.raises(LlmUnavailable):
        LlmExtractor(ScriptedLLM(down)).extract(flush, fallback_when_unavailable=False)
    write = LlmExtractor(ScriptedLLM(down)).extract(flush)
    assert write.mode == "extractive_fallback" and write.cards
    # A bad request is not an outage: it falls back at once either way.
    write = LlmExtractor(ScriptedLLM(LLMError("bad request", "client"))).extract(flush, fallback_when_unavailable=False)
    assert write.mode == "extractive_fallback"
