"""``memstream bench grammar-speed``: decode speed of a grammar-constrained extraction call on the
local LLM (SmolLM2), with the grammar checked after sampling (memstream.localllm's engine) and before
top-k (the library's own chain): the same prompt, temperature 0, so both produce the same tokens."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from memstream.adapters.gguf_convert import smollm2_gguf_path
from memstream.datasets import load_locomo, locomo_turns
from memstream.localllm.engine import REPEAT_LAST_N, Engine
from memstream.localllm.protocol import Sampling, response_format_grammar
from memstream.processors.write import prompts
from memstream.processors.write.compress import compress_turn

TIMED = ("grammar_after_sampling", "grammar_before_top_k")


def with_speeds(result: dict[str, Any]) -> dict[str, Any]:
    """Each timed run's tokens per second, and its seconds rounded."""
    for name in TIMED:
        row = result[name]
        row["tokens_per_s"] = round(row["completion_tokens"] / row["s"], 1)
        row["s"] = round(row["s"], 2)
    return result


def run_grammar_speed(data: Path, *, turns: int = 40, max_tokens: int = 300) -> dict[str, Any]:
    """The extraction call over the first ``turns`` turns of the first conversation of ``data``, timed both ways."""
    sample = load_locomo(data)[0]
    compressed = [compress_turn(t, None, 0.7) for t in locomo_turns(sample, tenant_id="t")][:turns]
    messages = [
        {"role": "system", "content": prompts.EXTRACT_SYSTEM},
        {"role": "user", "content": prompts.extract_user([("conversation", compressed)])},
    ]
    schema = prompts.extract_schema([ct.turn.turn_id for ct in compressed], 1)
    grammar = response_format_grammar({"type": "json_schema", "json_schema": {"schema": schema}})
    sampling = Sampling(max_tokens=max_tokens, temperature=0, seed=1, grammar=grammar)
    engine = Engine(str(smollm2_gguf_path()), n_ctx=4096, n_threads=1)
    tokens = engine.prompt_tokens(messages)
    result: dict[str, Any] = {"conversation": sample.sample_id, "turns": len(compressed), "prompt_tokens": len(tokens)}
    engine.complete(messages, sampling)  # warm: the prompt is in the KV cache for both timed runs
    started = time.perf_counter()
    lazy = engine.complete(messages, sampling)
    result["grammar_after_sampling"] = {"completion_tokens": lazy.completion_tokens, "s": time.perf_counter() - started}
    llm = engine._llm
    llm._configure_generation_sampler(
        0.0, sampling.top_k, sampling.top_p, sampling.min_p, sampling.repeat_penalty, REPEAT_LAST_N, 1, grammar
    )
    started = time.perf_counter()
    eager = engine._generate(tokens, max_tokens, (), None)
    result["grammar_before_top_k"] = {"completion_tokens": eager.completion_tokens, "s": time.perf_counter() - started}
    result["same_output"] = lazy.text == eager.text
    return with_speeds(result)
