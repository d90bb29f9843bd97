"""The attention adapter against the packaged MiniLM: its matrix form (torch, and the ONNX export)
equals the plain definition."""

import numpy as np
import pytest
import torch

from memstream.adapters.encoder_attention import EncoderAttention, eager_model, load_heads
from memstream.adapters.packaged_models import minilm_path
from memstream.processors.write.segment import head_scores

TEXTS = [
    "I adopted a puppy last week.",
    "She is a golden retriever and loves the park.",
    "Our puppy chewed my shoes!",
    "Anyway, the tax return is due on Friday.",
    "I still need the forms.",
]


@pytest.fixture(scope="module", params=["torch", "onnx"])
def attention(request) -> EncoderAttention:
    return EncoderAttention(backend=request.param)


@pytest.fixture(scope="module")
def reference_model():
    return eager_model(minilm_path())


def reference_cohesion(att: EncoderAttention, model, texts: list[str]) -> np.ndarray:
    """The definition, spelled out with loops: per gap, the mean-over-rows attention mass between the
    two turns before and the two after, both directions."""
    tok = att._tokenizer
    seq, spans = [tok.cls_token_id], []
    for text in texts:
        ids = tok(text, add_special_tokens=False, truncation=True, max_length=att.turn_tokens)["input_ids"]
        spans.append((len(seq), len(seq) + len(ids)))
        seq += [*ids, tok.sep_token_id]
    x = torch.tensor([seq])
    with torch.inference_mode():
        out = model(input_ids=x, attention_mask=torch.ones_like(x), output_attentions=True)
    attn = torch.stack(out.attentions)[:, 0].numpy()
    k = len(spans)
    mass = np.zeros((att.layers, att.heads, k, k))
    for a, (s, e) in enumerate(spans):
        for b, (s2, e2) in enumerate(spans):
            mass[:, :, a, b] = attn[:, :, s:e, s2:e2].sum(-1).mean(-1)
    gaps = np.zeros((k - 1, att.layers, att.heads))
    for a in range(1, k):
        lo, hi = max(0, a - 2), min(k, a + 2)
        gaps[a - 1] = mass[:, :, lo:a, a:hi].sum(-1).mean(-1) + mass[:, :, a:hi, lo:a].sum(-1).mean(-1)
    return gaps


def test_cohesion_matches_the_definition(attention: EncoderAttention, reference_model) -> None:
    got = attention.cohesion(TEXTS)
    assert got.shape == (len(TEXTS) - 1, attention.layers, attention.heads)
    np.testing.assert_allclose(got, reference_cohesion(attention, reference_model, TEXTS), rtol=1e-4, atol=1e-5)


def test_the_calibrated_heads_cohere_least_at_the_topic_change(attention: EncoderAttention) -> None:
    heads = load_heads(attention.name)
    assert heads, "the packaged encoder has calibrated heads"
    scores = head_scores(attention.cohesion(TEXTS), heads)
    assert int(np.argmin(scores)) == 2  # the gap before "Anyway, the tax return ..."


def test_a_window_longer_than_the_encoder_is_refused(attention: EncoderAttention) -> None:
    with pytest.raises(ValueError, match="exceed the attention window"):
        attention.cohesion(["word"] * (attention.max_turns + 1))
