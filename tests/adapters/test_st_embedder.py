"""The real MiniLM embedder: its cache answers repeats and concurrent callers share one computation."""

import threading

import numpy as np
import pytest

from memstream.adapters.st_embedder import SentenceTransformerEmbedder


@pytest.fixture(scope="module")
def embedder():
    return SentenceTransformerEmbedder(cache_size=8)


def test_cached_vectors_equal_fresh_ones_and_the_cache_is_bounded(embedder):
    texts = [f"sentence number {i} about gardening" for i in range(12)]
    first = embedder.embed(texts)
    assert first.shape == (12, embedder.dim)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-4)
    assert np.allclose(embedder.embed(texts[-3:]), embedder.embed_uncached(texts[-3:]), atol=1e-5)
    assert len(embedder._cache) == 8


def test_concurrent_callers_compute_a_text_once(embedder, monkeypatch):
    calls: list[list[str]] = []
    started = threading.Event()
    release = threading.Event()
    real = embedder.embed_uncached

    def slow(texts):
        calls.append(list(texts))
        started.set()
        release.wait(5)
        return real(texts)

    monkeypatch.setattr(embedder, "embed_uncached", slow)
    results = {}
    a = threading.Thread(target=lambda: results.setdefault("a", embedder.embed(["shared text", "only a"])))
    a.start()
    started.wait(5)
    b = threading.Thread(target=lambda: results.setdefault("b", embedder.embed(["shared text"])))
    b.start()
    release.set()
    a.join(5)
    b.join(5)
    assert calls == [["shared text", "only a"]]  # b waited for a's computation
    assert np.allclose(results["a"][0], results["b"][0])


def test_every_call_reports_what_it_computed_and_what_the_cache_answered():
    counts: list[tuple[int, int]] = []
    embedder = SentenceTransformerEmbedder(on_embed=lambda computed, cached: counts.append((computed, cached)))
    embedder.embed(["Caroline", "a sunny day in Lisbon"])
    embedder.embed(["Caroline", "Melanie", "Caroline"])
    assert counts == [(2, 0), (1, 2)]


def test_float16_is_refused_where_it_cannot_help():
    # float16 is a GPU setting: on a CPU it is slower, and the ONNX backends have no such switch.
    with pytest.raises(ValueError, match="CUDA"):
        SentenceTransformerEmbedder(backend="torch", device="cpu", precision="float16")
    with pytest.raises(ValueError, match="torch backend"):
        SentenceTransformerEmbedder(backend="onnx", precision="float16")


def test_a_float16_file_is_still_run_in_float32(tmp_path):
    # transformers keeps a float16 file's dtype unless told otherwise; precision float32 must mean it.
    import shutil

    from safetensors.torch import load_file, save_file

    from memstream.adapters.packaged_models import minilm_path

    folder = tmp_path / "minilm16"
    shutil.copytree(minilm_path(), folder)
    weights = load_file(str(folder / "model.safetensors"))
    save_file(
        {k: (v.half() if v.is_floating_point() else v) for k, v in weights.items()}, str(folder / "model.safetensors")
    )
    halved = SentenceTransformerEmbedder(str(folder), backend="torch", cache_size=0)
    full = SentenceTransformerEmbedder(backend="torch", cache_size=0)
    texts = ["Nora's pottery class meets on Thursdays.", "Tomas adopted a dog named Pico."]
    assert halved.dtype == "float32"
    assert np.min(np.sum(halved.embed(texts) * full.embed(texts), axis=1)) > 0.9999
