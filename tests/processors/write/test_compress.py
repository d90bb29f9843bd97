import pytest

from memstream.config import Settings
from memstream.processors.write.compress import compress_turn, protected_words, split_turn
from tests.factories import turn


class KeepEveryOtherWord:
    """A deterministic compressor double: drops every second word unless protected."""

    name = "every-other"

    def __init__(self):
        self.calls = []

    def compress(self, text, *, keep_rate, force_keep=()):
        self.calls.append((text, keep_rate, tuple(force_keep)))
        words = text.split()
        return " ".join(w for i, w in enumerate(words) if i % 2 == 0 or w.strip(".,!?") in force_keep)


def test_without_a_compressor_the_text_passes_through_and_says_so():
    t = turn(text="I went to the museum in Lisbon on 3 May.")
    out = compress_turn(t, None, 0.7)
    assert out.compressed_text == t.text and out.compressor == "off"
    assert out.tokens_in == out.tokens_out > 0
    assert out.turn == t  # the raw turn travels on for Replay


def test_digits_dates_names_and_the_speaker_are_protected():
    t = turn(text="Caroline met Melanie at 10:30 on 3 May in Lisbon", speaker="Caroline")
    words = protected_words(t)
    assert {"Caroline", "Melanie", "10:30", "3", "May", "Lisbon"} <= set(words)
    compressor = KeepEveryOtherWord()
    out = compress_turn(t, compressor, 0.5)
    assert compressor.calls[0][1] == 0.5
    for w in ("Melanie", "10:30", "3", "Lisbon"):
        assert w in out.compressed_text.split()
    assert out.tokens_out < out.tokens_in and out.compressor == "every-other"


def test_an_empty_compression_never_loses_the_turn():
    class Nothing:
        name = "nothing"

        def compress(self, text, *, keep_rate, force_keep=()):
            return "  "

    t = turn(text="ok then")
    assert compress_turn(t, Nothing(), 0.5).compressed_text == "ok then"


def test_a_turn_within_the_limit_is_not_split():
    t = turn(text="short")
    assert split_turn(t, 1000) == [t]


def test_a_long_turn_becomes_chunks_of_its_id_cut_at_breaks_and_losing_no_text():
    sentences = [f"Sentence number {i} says something about Lisbon." for i in range(400)]
    t = turn("D3:4", " ".join(sentences), last=True).model_copy(update={"metadata": {"seq": 7}})
    chunks = split_turn(t, 2000)
    assert len(chunks) > 1 and all(len(c.text) <= 2000 for c in chunks)
    assert [c.turn_id for c in chunks] == [f"D3:4#{i}" for i in range(1, len(chunks) + 1)]
    assert all(c.text.endswith(".") for c in chunks)  # cut after a sentence, not inside a word
    assert " ".join(c.text for c in chunks).split() == t.text.split()  # nothing lost, nothing added
    assert [c.last_in_session for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert {c.metadata["seq"] for c in chunks} == {7} and chunks[0].metadata["chunk_of"] == "D3:4"
    assert {(c.speaker, c.event_time, c.session_id) for c in chunks} == {(t.speaker, t.event_time, t.session_id)}


def test_text_without_breaks_is_cut_hard_and_an_id_too_long_for_a_chunk_is_refused():
    chunks = split_turn(turn(text="x" * 2500), 1000)
    assert [len(c.text) for c in chunks] == [1000, 1000, 500]
    with pytest.raises(ValueError):
        split_turn(turn("D" * 127, "x" * 2500), 1000)


def test_a_76k_character_turn_is_split_under_the_default_caps():
    s = Settings()
    text = "word " * (76_560 // 5)
    assert s.max_turn_chars < len(text) <= s.max_turn_chars_hard
    chunks = split_turn(turn(text=text), s.max_turn_chars)
    assert len(chunks) == 3 and all(len(c.text) <= s.max_turn_chars for c in chunks)
