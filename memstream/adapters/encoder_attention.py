"""Turn-to-turn attention of a small encoder over a sensory window (coarse topic boundaries).

The window's turns (each cut to its first ``turn_tokens`` word pieces, which carry its topic) are
joined as ``[CLS] t0 [SEP] t1 [SEP] ...`` and run once with attentions. For every gap between two
turns the result is its *cohesion* per layer and head: the attention mass the two turns before the
gap send to the two turns after it, plus the reverse. A topic change shows as low cohesion.

Backends: ``torch`` (transformers, eager attention) and ``onnx``: the same model and the attention-mass
product exported once (``memstream.adapters.onnx_encoder``'s cache) and run by ONNX Runtime, which
returns only the (layers, heads, turns, turns) masses instead of every attention matrix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np

from .packaged_models import model_name, model_path

# Calibrated "semantic" heads per encoder (memstream bench calibrate-heads writes it).
HEADS_FILE = Path(__file__).resolve().parent.parent / "data" / "attention_heads.json"

AttentionBackend = Literal["torch", "onnx"]
MassFn = Callable[[list[int], np.ndarray, np.ndarray], np.ndarray]  # ids, rows_mean, cols_sum -> mass


class EncoderAttention:
    """Per-head cohesion of adjacent turns from a BERT-style encoder (the packaged MiniLM unless told)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        turn_tokens: int = 40,
        max_tokens: int = 512,
        backend: AttentionBackend = "torch",
        threads: int = 1,
    ):
        """``threads``: ONNX Runtime's (torch's are the worker's setting)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        path = model_path(model)
        self.name = model_name(path)
        self.backend = backend
        # The model folder's own files, read without transformers: importing it (and torch with it)
        # cost a worker ~10 s of its start while ONNX Runtime runs the model.
        self._tokenizer = FolderTokenizer(Path(path))
        config = json.loads((Path(path) / "config.json").read_text())
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.turn_tokens = turn_tokens
        self.max_tokens = min(max_tokens, int(config.get("max_position_embeddings", max_tokens)))
        if backend == "torch":
            self._mass = _torch_mass(path)
        elif backend == "onnx":
            self._mass = _onnx_mass(Path(path), threads)
        else:
            raise ValueError(f"unknown attention backend {backend!r}: torch or onnx")

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
        # mass[l, h, a, b]: mean over turn a's tokens of the attention they pay to turn b's tokens,
        # as rows_mean @ attention @ cols_sum per layer (no (layers, heads, T, T) copy).
        k, total = len(spans), len(seq)
        rows_mean = np.zeros((k, total), dtype=np.float32)
        cols_sum = np.zeros((total, k), dtype=np.float32)
        for a, (s, e) in enumerate(spans):
            rows_mean[a, s:e] = 1.0 / (e - s)
            cols_sum[s:e, a] = 1.0
        mass = self._mass(seq, rows_mean, cols_sum)
        gaps = np.zeros((max(k - 1, 0), self.layers, self.heads), dtype=np.float32)
        for a in range(1, k):
            lo, hi = max(0, a - 2), min(k, a + 2)
            gaps[a - 1] = mass[:, :, lo:a, a:hi].sum(-1).mean(-1) + mass[:, :, a:hi, lo:a].sum(-1).mean(-1)
        return gaps


class FolderTokenizer:
    """The model folder's fast tokenizer (tokenizer.json) as transformers' would cut a turn: its word
    pieces without special tokens, the first ``max_length``; the special tokens' ids by their names
    in special_tokens_map.json."""

    def __init__(self, folder: Path):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        special = json.loads((folder / "special_tokens_map.json").read_text())

        def token_id(name: str) -> int:
            token = special[name]
            token_id = self._tokenizer.token_to_id(token["content"] if isinstance(token, dict) else token)
            if token_id is None:
                raise ValueError(f"{folder}: the {name} {token!r} is not in tokenizer.json")
            return token_id

        self.cls_token_id, self.sep_token_id, self.unk_token_id = (
            token_id(n) for n in ("cls_token", "sep_token", "unk_token")
        )

    def __call__(
        self, text: str, *, add_special_tokens: bool, truncation: bool, max_length: int
    ) -> dict[str, list[int]]:
        ids = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        return {"input_ids": ids[:max_length] if truncation else ids}


def eager_model(path: str) -> Any:
    """The encoder in transformers, with eager attention: the fused kernels return no weights."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(path, attn_implementation="eager").eval()


def _mass_module(model: Any) -> Any:
    """The encoder with its attention masses as its output, (layers, heads, turns, turns)."""
    import torch

    class Mass(torch.nn.Module):
        def __init__(self, inner: Any):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, rows_mean: Any, cols_sum: Any) -> Any:
            mask = torch.ones_like(input_ids)
            out = self.inner(input_ids=input_ids, attention_mask=mask, output_attentions=True)
            return torch.stack([rows_mean @ layer[0].float() @ cols_sum for layer in out.attentions])

    return Mass(model).eval()


def _torch_mass(path: str) -> MassFn:
    import torch

    module = _mass_module(eager_model(path))

    def mass(ids: list[int], rows_mean: np.ndarray, cols_sum: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.tensor([ids]), torch.from_numpy(rows_mean), torch.from_numpy(cols_sum)).numpy()

    return mass


def _onnx_mass(model_dir: Path, threads: int) -> MassFn:
    import onnxruntime as ort

    from memstream.cache import made_once

    from .onnx_encoder import OPSET, model_cache_folder

    def export(target: Path) -> None:
        import torch

        module = _mass_module(eager_model(str(model_dir)))
        example = (torch.ones((1, 12), dtype=torch.long), torch.zeros((3, 12)), torch.zeros((12, 3)))
        axes = {
            "input_ids": {1: "tokens"},
            "rows_mean": {0: "turns", 1: "tokens"},
            "cols_sum": {0: "tokens", 1: "turns"},
            "mass": {2: "turns", 3: "turns"},
        }
        with torch.no_grad():
            torch.onnx.export(
                module,
                example,
                str(target),
                input_names=["input_ids", "rows_mean", "cols_sum"],
                output_names=["mass"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )

    path = made_once(model_cache_folder(model_dir) / "attention-mass.onnx", export)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def mass(ids: list[int], rows_mean: np.ndarray, cols_sum: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": np.asarray([ids], dtype=np.int64), "rows_mean": rows_mean, "cols_sum": cols_sum}
        return session.run(None, feeds)[0]

    return mass


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
