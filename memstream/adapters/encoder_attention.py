"""Turn-to-turn attention of a small encoder over a sensory window (coarse topic boundaries).

The window's turns (each cut to its first ``turn_tokens`` word pieces, which carry its topic) are
joined as ``[CLS] t0 [SEP] t1 [SEP] ...`` and run once with attentions. For every gap between two
turns the result is its *cohesion* per layer and head: the attention mass the two turns before the
gap send to the two turns after it, plus the reverse. A topic change shows as low cohesion.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

# Calibrated "semantic" heads per encoder (memstream bench calibrate-heads writes it).
HEADS_FILE = Path(__file__).resolve().parent.parent / "data" / "attention_heads.json"


def model_name(path: str) -> str:
    """A stable name for a model folder (the packaged MiniLM lives in a folder called ``model``)."""
    from .st_embedder import default_model_path

    if os.path.realpath(path) == os.path.realpath(default_model_path()):
        return "all-MiniLM-L6-v2"
    return os.path.basename(path.rstrip("/")) or path


class EncoderAttention:
    """Per-head cohesion of adjacent turns from a BERT-style encoder (the embedder's own weights)."""

    def __init__(self, model_path: str | None = None, *, turn_tokens: int = 40, max_tokens: int = 512):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        from .st_embedder import default_model_path

        path = model_path or default_model_path()
        self.name = model_name(path)
        self._torch = torch
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        # Eager attention: the fused kernels do not return attention weights.
        self._model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
        config = self._model.config
        self.layers = int(config.num_hidden_layers)
        self.heads = int(config.num_attention_heads)
        self.turn_tokens = turn_tokens
        self.max_tokens = min(max_tokens, int(getattr(config, "max_position_embeddings", max_tokens)))

    @property
    def max_turns(self) -> int:
        """How many turns fit the window at ``turn_tokens`` each (plus one separator each)."""
        return (self.max_tokens - 1) // (self.turn_tokens + 1)

    def cohesion(self, texts: Sequence[str]) -> np.ndarray:
        """Shape ``(len(texts) - 1, layers, heads)``: row ``a - 1`` is the gap before turn ``a``."""
        if len(texts) > self.max_turns:
            raise ValueError(f"{len(texts)} turns exceed the attention window of {self.max_turns}")
        tok = self._tokenizer
        seq: list[int] = [tok.cls_token_id]
        spans: list[tuple[int, int]] = []
        for text in texts:
            ids = tok(text, add_special_tokens=False, truncation=True, max_length=self.turn_tokens)["input_ids"]
            ids = ids or [tok.unk_token_id]  # an empty turn still occupies a place
            spans.append((len(seq), len(seq) + len(ids)))
            seq += [*ids, tok.sep_token_id]
        torch = self._torch
        x = torch.tensor([seq])
        with torch.inference_mode():
            out = self._model(input_ids=x, attention_mask=torch.ones_like(x), output_attentions=True)
            # mass[l, h, a, b]: mean over turn a's tokens of the attention they pay to turn b's tokens,
            # as rows_mean @ attention @ cols_sum per layer (no (layers, heads, T, T) copy).
            k, total = len(spans), len(seq)
            rows_mean = torch.zeros(k, total)
            cols_sum = torch.zeros(total, k)
            for a, (s, e) in enumerate(spans):
                rows_mean[a, s:e] = 1.0 / (e - s)
                cols_sum[s:e, a] = 1.0
            mass = torch.stack([rows_mean @ layer[0].float() @ cols_sum for layer in out.attentions]).numpy()
        gaps = np.zeros((max(k - 1, 0), self.layers, self.heads), dtype=np.float32)
        for a in range(1, k):
            lo, hi = max(0, a - 2), min(k, a + 2)
            gaps[a - 1] = mass[:, :, lo:a, a:hi].sum(-1).mean(-1) + mass[:, :, a:hi, lo:a].sum(-1).mean(-1)
        return gaps


def load_heads(model_name: str, path: Path = HEADS_FILE) -> tuple[tuple[int, int], ...]:
    """Calibrated heads for ``model_name``; empty (= every upper-layer head) when not calibrated."""
    if not path.exists():
        return ()
    entry = json.loads(path.read_text()).get(model_name)
    return tuple((int(layer), int(h)) for layer, h in entry["heads"]) if entry else ()


def save_heads(model_name: str, calibration: dict[str, Any], path: Path = HEADS_FILE) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    data[model_name] = calibration
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
