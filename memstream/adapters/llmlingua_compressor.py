"""Compressor port over llmlingua's PromptCompressor (LLMLingua-2 token classification)."""

from __future__ import annotations

import os
from typing import Sequence


class LLMLinguaCompressor:
    def __init__(self, model_path: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from llmlingua import PromptCompressor

        self.name = f"llmlingua2:{os.path.basename(model_path.rstrip('/'))}"
        self._compressor = PromptCompressor(model_name=model_path, use_llmlingua2=True, device_map="cpu")

    def compress(self, text: str, *, keep_rate: float, force_keep: Sequence[str] = ()) -> str:
        result = self._compressor.compress_prompt(
            [text], rate=keep_rate, force_tokens=list(force_keep)[:64], drop_consecutive=True
        )
        return str(result["compressed_prompt"])
