"""``python -m memstream.localllm --model PATH [...]``: serve a GGUF model over the OpenAI API.

The flag names are llama-cpp-python's server's (``python -m llama_cpp.server``), which this replaces.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m memstream.localllm", description=__doc__)
    parser.add_argument("--model", required=True, help="path of the GGUF model")
    parser.add_argument("--model_alias", default=None, help="model id reported by /v1/models (default: file name)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--n_ctx", type=int, default=4096, help="context window in tokens")
    parser.add_argument("--n_threads", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="decode threads")
    parser.add_argument("--n_threads_batch", type=int, default=None, help="prompt threads (default: --n_threads)")
    parser.add_argument("--n_batch", type=int, default=512, help="prompt tokens per llama_decode call")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    from .server import run

    options = vars(args)
    alias = options.pop("model_alias") or os.path.basename(args.model)
    run(alias=alias, **options)  # every other flag is one of run's parameters, by its name


if __name__ == "__main__":
    main()
