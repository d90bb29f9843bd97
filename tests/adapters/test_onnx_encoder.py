"""The ONNX backends of the embedder: exported from the packaged MiniLM, they give torch's vectors
(int8: nearly), in the input order, and refuse a model whose pooling they would get wrong."""

import json
from pathlib import Path

import numpy as np
import pytest

from memstream.adapters.onnx_encoder import (
    UnsupportedModel,
    check_mean_pooled,
    length_batches,
    mean_pooled,
    model_fingerprint,
)
from memstream.adapters.packaged_models import minilm_path
from memstream.adapters.st_embedder import SentenceTransformerEmbedder

TEXTS = [
    "Caroline went to an LGBTQ support group yesterday.",
    "ok",
    "Melanie painted a sunrise over the lake last year, and she is proud of how the light came out.",
    "The pottery class starts at seven on Thursdays.",
    "Tomas adopted a dog called Pepper.",
]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return SentenceTransformerEmbedder().embed_uncached(TEXTS)


@pytest.mark.parametrize(("backend", "tolerance"), [("onnx", 1e-4), ("onnx-int8", 0.05)])
def test_onnx_vectors_follow_torch_in_input_order(torch_vectors, backend, tolerance):
    embedder = SentenceTransformerEmbedder(backend=backend, batch_size=2)  # batches of mixed lengths
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == torch_vectors.shape and embedder.dim == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(vectors * torch_vectors, axis=1)
    assert cosine.min() > 1 - tolerance, cosine
    # each text is still nearest to its own torch vector
    assert list(np.argmax(vectors @ torch_vectors.T, axis=1)) == list(range(len(TEXTS)))


def test_a_token_budget_follows_the_vectors_of_batches_by_count(torch_vectors):
    by_budget = SentenceTransformerEmbedder(backend="onnx", batch_size=64, batch_tokens=24).embed_uncached(TEXTS)
    assert np.sum(by_budget * torch_vectors, axis=1).min() > 1 - 1e-4


def test_length_batches_pad_little_and_keep_to_both_limits():
    lengths = [30, 3, 12, 4, 200, 11, 5]
    batches = length_batches(lengths, max_rows=3, max_tokens=40)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # every text once
    assert batches == [[1, 3, 6], [5, 2], [0], [4]]  # shortest first; 200 > 40 goes alone
    for batch in batches:
        assert len(batch) <= 3 and (len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 40)
    assert length_batches(lengths, max_rows=4) == [[1, 3, 6, 5], [2, 0, 4]]  # no budget: by count


def test_mean_pooling_ignores_padding_and_normalises():
    hidden = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]])
    assert np.allclose(mean_pooled(hidden, mask), [[1.0, 0.0]])


def _folder(tmp_path: Path, pooling: dict, modules: list[str]) -> Path:
    (tmp_path / "1_Pooling").mkdir(parents=True)
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    entries = [
        {"path": "1_Pooling" if m == "Pooling" else "", "type": f"sentence_transformers.models.{m}"} for m in modules
    ]
    (tmp_path / "modules.json").write_text(json.dumps(entries))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    return tmp_path


def test_only_mean_pooled_models_are_taken(tmp_path):
    assert check_mean_pooled(Path(minilm_path())) == 256
    mean = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}
    assert check_mean_pooled(_folder(tmp_path / "a", mean, ["Transformer", "Pooling"])) == 128
    cls = {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
    with pytest.raises(UnsupportedModel, match="mean pooling only"):
        check_mean_pooled(_folder(tmp_path / "b", cls, ["Transformer", "Pooling", "Normalize"]))
    with pytest.raises(UnsupportedModel, match="modules"):
        check_mean_pooled(_folder(tmp_path / "c", mean, ["Transformer", "Pooling", "Dense"]))
    with pytest.raises(UnsupportedModel, match="not a sentence-transformers folder"):
        check_mean_pooled(tmp_path)


def test_the_export_is_keyed_by_the_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    before = model_fingerprint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"y" * 11)
    assert model_fingerprint(tmp_path) != before


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown embedding backend"):
        SentenceTransformerEmbedder(backend="tensorflow")  # type: ignore[arg-type]


def test_workers_embed_with_the_configured_backend_and_device():
    from memstream.config import Settings

    assert SentenceTransformerEmbedder.from_settings(Settings()).backend == "onnx"
    assert SentenceTransformerEmbedder.from_settings(Settings(embedding_backend="torch")).backend == "torch"
    with pytest.raises(ValueError):
        Settings(embedding_device="tpu")


def _tiny_mpnet(folder: Path) -> Path:
    """A small random MPNet as a sentence-transformers folder (MiniLM's word pieces): a model that
    takes no token types."""
    import shutil

    from transformers import MPNetConfig, MPNetModel

    minilm = Path(minilm_path())
    config = MPNetConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    MPNetModel(config).save_pretrained(str(folder))
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "modules.json"):
        shutil.copy(minilm / name, folder / name)
    shutil.copytree(minilm / "1_Pooling", folder / "1_Pooling")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    return folder


def test_a_model_without_token_types_runs_on_onnx_as_in_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its export stays in the test's folder
    folder = str(_tiny_mpnet(tmp_path / "tiny-mpnet"))
    torch_vectors = SentenceTransformerEmbedder(folder).embed_uncached(TEXTS)
    onnx = SentenceTransformerEmbedder(folder, backend="onnx", batch_size=2)  # padded batches
    vectors = onnx.embed_uncached(TEXTS)
    assert onnx.dim == 32 and vectors.shape == torch_vectors.shape
    assert np.sum(vectors * torch_vectors, axis=1).min() > 1 - 1e-4
