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
