"""A statement's provenance: its own turns, not every turn near it."""

from __future__ import annotations

from memstream.processors.write.extract import ExtractiveExtractor, LlmExtractor
from memstream.processors.write.index import PROFILES, points_for_write
from memstream.processors.write.provenance import capped_provenance, supporting_turns
from tests.factories import flush_of, turn
from tests.processors.write.test_extract import GOOD, ScriptedLLM

TURNS = [
    ("D1:1", "I started volunteering at the animal shelter on Sundays."),
    ("D1:2", "My brother moved to Lisbon for a new job."),
    ("D1:3", "The shelter has twelve dogs waiting for a home right now."),
    ("D1:4", "We had pizza after the movie."),
]


def test_the_turns_that_share_the_statements_words_in_conversation_order():
    assert supporting_turns("Volunteers at the animal shelter with the dogs", TURNS, 2) == ["D1:1", "D1:3"]
    assert supporting_turns("Volunteers at the shelter", TURNS, 1) == ["D1:1"]  # a tie goes to the earlier
    assert supporting_turns("Plays the cello", TURNS, 2) == []


def test_a_card_citing_more_turns_than_allowed_keeps_those_that_support_it():
    assert capped_provenance("Her brother works in Lisbon", TURNS, 4) == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert capped_provenance("Her brother got a job in Lisbon", TURNS, 1) == ["D1:2"]
    assert capped_provenance("Something else entirely", TURNS, 2) == ["D1:1", "D1:2"]


def test_an_llm_card_citing_the_whole_flush_is_cut_to_its_own_turns():
    flush = flush_of(*[turn(tid, text, speaker="Ana", seq=i) for i, (tid, text) in enumerate(TURNS)])
    card = {"subject": "Ana", "type": "fact", "content": "Ana's brother moved to Lisbon for a job.",
            "turn_ids": [t for t, _ in TURNS]}  # fmt: skip
    llm = ScriptedLLM({**GOOD, "cards": [card], "profiles": []})
    write = LlmExtractor(llm, max_card_turns=2).extract(flush)
    assert write.mode == "llm", write.mode
    assert [c.provenance.turn_ids for c in write.cards] == [["D1:2"]]


def test_a_profile_item_cites_the_turn_it_came_from_not_the_speakers_others():
    flush = flush_of(
        turn("D1:1", "I really enjoy hiking in the hills on Sundays.", speaker="Mel"),
        turn("D1:2", "My car broke down again on the way to work.", speaker="Mel", seq=1),
        turn("D1:3", "My favourite painter is Frida Kahlo, by far.", speaker="Mel", seq=2),
    )
    write = ExtractiveExtractor().extract(flush)
    specs = [s for s in points_for_write(write) if s.collection == PROFILES]
    assert {s.payload["text"]: s.payload["turn_ids"] for s in specs} == {
        "I really enjoy hiking in the hills on Sundays.": ["D1:1"],
        "My favourite painter is Frida Kahlo, by far.": ["D1:3"],
    }
