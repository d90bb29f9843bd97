from memstream.processors.compress import compress_turn, protected_words
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
