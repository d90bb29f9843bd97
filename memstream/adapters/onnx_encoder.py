"""A sentence-transformers model (Transformer → mean pooling → normalise, as all-MiniLM-L6-v2 is)
run by ONNX Runtime instead of torch: the embedder's ``onnx`` and ``onnx-int8`` backends.

The ONNX graph is exported locally from the model folder (torch's exporter; no model hub), once per
model file, into a cache folder; ``onnx-int8`` adds ONNX Runtime's dynamic int8 quantisation of the
weights, per output channel. Tokenisation uses the folder's own ``tokenizer.json`` with the model's ``max_seq_length``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memstream.cache import cache_dir as cache_dir_of
from memstream.cache import made_once

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17


class UnsupportedModel(ValueError):
    """The model folder is not one the ONNX backend can run exactly like sentence-transformers."""


def check_mean_pooled(model_dir: Path) -> int:
    """The model's max_seq_length, once its modules are known to be Transformer → mean pooling
    (→ Normalize): other poolings would give other vectors than the torch backend."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
        types = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling_dir = next(model_dir / m["path"] for m in modules if m["type"].endswith("Pooling"))
        pooling = json.loads((pooling_dir / "config.json").read_text())
        config = json.loads((model_dir / "sentence_bert_config.json").read_text())
    except (OSError, KeyError, StopIteration, ValueError) as exc:
        raise UnsupportedModel(f"{model_dir} is not a sentence-transformers folder: {exc}") from exc
    if types[:2] != ["Transformer", "Pooling"] or not set(types[2:]) <= {"Normalize"}:
        raise UnsupportedModel(f"{model_dir}: modules {types}; the ONNX backend runs Transformer, Pooling, Normalize")
    modes = [k for k, v in pooling.items() if k.startswith("pooling_mode") and v]
    if modes != ["pooling_mode_mean_tokens"]:
        raise UnsupportedModel(f"{model_dir}: pooling {modes}; the ONNX backend does mean pooling only")
    return int(config.get("max_seq_length", 512))


def model_fingerprint(model_dir: Path) -> str:
    """Changes when the weights or the config change (size and mtime: no need to hash 90 MB)."""
    parts = []
    for name in ("config.json", "model.safetensors", "pytorch_model.bin"):
        path = model_dir / name
        if path.exists():
            st = path.stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def export_onnx(model_dir: Path, target: Path) -> None:
    """The Transformer module as ONNX (inputs ids/mask/types, output the last hidden state)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir)).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, inner: Any):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    example = torch.ones((2, 8), dtype=torch.long)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(
            LastHidden(model),
            (example, example, torch.zeros_like(example)),
            str(target),
            input_names=list(INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,  # the TorchScript exporter: no onnxscript dependency, dynamic axes as given
        )


def model_cache_folder(model_dir: Path, cache_dir: Path | None = None) -> Path:
    """Where the exports of this model (this version of its weights) live."""
    return (cache_dir or cache_dir_of("onnx")) / f"{model_dir.name}-{model_fingerprint(model_dir)}"


def exported_model(model_dir: Path, *, quantized: bool, cache_dir: Path | None = None) -> Path:
    """The model's ONNX file (int8-quantised with ``quantized``), exported once into the cache."""
    folder = model_cache_folder(model_dir, cache_dir)
    fp32 = made_once(folder / "model.onnx", lambda tmp: export_onnx(model_dir, tmp))
    if not quantized:
        return fp32

    def quantize(tmp: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # Per output channel: one scale per tensor drifted much further from torch on short texts.
        quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)

    return made_once(folder / "model-int8-per-channel.onnx", quantize)


class OnnxEncoder:
    """Mean-pooled, L2-normalised sentence vectors from ONNX Runtime on the CPU."""

    def __init__(self, model_dir: str, *, quantized: bool, threads: int = 1, cache_dir: Path | None = None):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        folder = Path(model_dir)
        max_tokens = check_mean_pooled(folder)
        self.path = exported_model(folder, quantized=quantized, cache_dir=cache_dir)
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.no_padding()
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        # The exporter drops inputs the model never reads (MPNet has no token types).
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.dim = int(json.loads((folder / "config.json").read_text())["hidden_size"])  # mean pooling keeps it

    def encode(self, texts: Sequence[str], *, batch_size: int, batch_tokens: int = 0) -> np.ndarray:
        """``batch_size`` texts at most per forward pass, and (``batch_tokens`` > 0) at most that many
        padded tokens: on a CPU a few hundred tokens per pass are fastest (``bench embed``)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        vectors, order = [], []
        for batch in length_batches([len(e) for e in encodings], batch_size, batch_tokens):
            rows = [encodings[i] for i in batch]
            ids = np.zeros((len(rows), max(map(len, rows))), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, row in enumerate(rows):
                ids[r, : len(row)] = row
                mask[r, : len(row)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            feeds = {name: value for name, value in feeds.items() if name in self._inputs}
            vectors.append(mean_pooled(self._session.run(None, feeds)[0], mask))
            order += batch
        sorted_vectors = np.concatenate(vectors)
        out = np.empty_like(sorted_vectors)
        out[order] = sorted_vectors
        return out


def length_batches(lengths: Sequence[int], max_rows: int, max_tokens: int = 0) -> list[list[int]]:
    """Indices grouped shortest first (little padding): each group at most ``max_rows`` long and, with
    ``max_tokens`` > 0, at most that many tokens once padded to its longest (a longer text goes alone)."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        last = batches[-1] if batches else []
        if last and len(last) < max_rows and (max_tokens <= 0 or (len(last) + 1) * lengths[i] <= max_tokens):
            last.append(i)
        else:
            batches.append([i])
    return batches


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over the real tokens, then L2-normalised (Pooling + Normalize of sentence-transformers)."""
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    vectors = summed / counts
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
