"""Which sentences the extractive mode files under its speaker's profile."""

from __future__ import annotations

import pytest

from memstream.bench.profile import load_split, scores
from memstream.processors.write.statements import is_question, speakers_preference, states_preference


@pytest.mark.parametrize(
    "sentence",
    [
        "What did it look like?",  # a question (the demo filed this one)
        "It's like a cool form of self-expression.",  # "like" as a preposition
        "It's a reminder to love my authentic self - it's taken a while to get here.",
        "My sister loves jazz and drags me to concerts.",  # someone else's taste
        "I feel like the meeting went well.",
        "I'd like to book a table for two.",  # a wish
        "how do you like the new flat",  # a question without its mark
    ],
)
def test_not_a_statement_of_the_speakers_own_taste(sentence):
    assert not speakers_preference(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "I really enjoy hiking in the hills.",
        "I don't like horror films at all.",
        "My favourite band is Radiohead.",
        "I'm not a fan of crowded beaches.",
        "I've always loved the sea.",
        "Pottery is something I love.",
        "I can't stand loud restaurants.",
        "I'm really into board games these days.",
    ],
)
def test_a_statement_of_the_speakers_own_taste(sentence):
    assert speakers_preference(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "And here's one of the adoption agencies I'm looking into.",
        "We're moving into a bigger flat next month.",
        "I'm going into the office early tomorrow.",
    ],
)
def test_into_after_a_verb_is_no_taste(sentence):
    assert not speakers_preference(sentence)


def test_a_card_is_a_preference_whoever_holds_it_but_never_a_question():
    assert states_preference("My sister loves jazz.") and not speakers_preference("My sister loves jazz.")
    assert not states_preference("Do you love jazz?") and is_question("Do you love jazz?")
    assert not states_preference("That sounds like a lot of work.")


def test_the_rules_beat_the_keyword_rule_on_the_held_out_labels():
    report = load_split("report")
    rules, keywords = scores(report, speakers_preference), scores(report, lambda s: "like" in s or "love" in s)
    assert rules["precision"] >= 0.85 and rules["recall"] >= 0.8
    assert rules["f1"] > keywords["f1"]
