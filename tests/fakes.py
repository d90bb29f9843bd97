"""Test doubles of the ports: a store that holds nothing, embedders without a model, an LLM that
replays a script, a clock the test moves."""

from __future__ import annotations

import hashlib

import numpy as np

from memstream.ports import LlmResult


class EmptyStore:
    """A store that holds nothing: every read comes back empty."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: 0 if name == "count" else []


class ZeroEmbedder:
    """Every text embeds to zeros."""

    dim = 8

    def embed(self, texts):
        return np.zeros((len(texts), self.dim), dtype=np.float32)


class Clock:
    """A clock the test moves by hand (``clock.now += 5``); called, it tells the time in seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedLLM:
    """A test double of the LLM port: returns (or raises) prepared results in order, and keeps each call."""

    model = "scripted"

    def __init__(self, *script: LlmResult | Exception):
        self.script = list(script)
        self.calls: list[dict] = []

    def complete(self, messages, *, json_schema=None, schema_name="output", max_tokens=None, timeout_s=None):
        self.calls.append(
            {
                "messages": list(messages),
                "json_schema": json_schema,
                "schema_name": schema_name,
                "max_tokens": max_tokens,
            }
        )
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


DIM = 8


class HashEmbedder:
    """Deterministic unit vectors from the text (the store needs vectors, not meaning)."""

    dim = DIM
    name = "hash"

    def embed(self, texts):
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows) if rows else np.zeros((0, DIM), np.float32)

    def clear_cache(self) -> None:
        pass
