"""Construction cost and speed: LoCoMo conversations streamed through the real Kafka pipeline.

Counts what the write path spends (flushes, LLM calls and tokens, compression), what it builds
(cards, scenes, triggers) and how fast (turns/s end to end against the raw embedding speed of the
same model on the same texts, measured in the same run)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from memstream.bench.deploy import deploy_worker, llm_costs, worker_samples
from memstream.bench.deployment import Deployment
from memstream.config import Settings
from memstream.datasets import load_locomo, locomo_turns
from memstream.schemas import CompressedTurn, MemoryWrite, SchemaError, StmFlush, Turn
from memstream.streams import runtime

TENANT = "bench"


@dataclass
class IngestOptions:
    data: Path
    conversations: Sequence[str] = ()  # sample ids; empty = every conversation in the file
    sessions: int | None = None  # only the first N sessions of each
    llm: bool = False
    compressor_model: str | None = None
    workdir: Path = Path(".data/bench/ingest")


def load_turns(options: IngestOptions) -> list[Turn]:
    samples = load_locomo(options.data)
    if options.conversations:
        wanted = set(options.conversations)
        samples = [s for s in samples if s.sample_id in wanted]
        missing = wanted - {s.sample_id for s in samples}
        if missing:
            raise ValueError(f"no conversation(s) {sorted(missing)} in {options.data}")
    turns: list[Turn] = []
    for sample in samples:
        turns += locomo_turns(sample, tenant_id=TENANT, max_sessions=options.sessions)
    return turns


def raw_embedding_speed(texts: Sequence[str], settings: Settings) -> float:
    """Sentences per second of the worker's embedding model on these texts, batched, no cache."""
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder

    runtime.apply_torch_threads(settings)
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    embedder.embed_uncached(list(texts[:32]))  # warm-up
    started = time.perf_counter()
    embedder.embed_uncached(list(texts))
    return len(texts) / (time.perf_counter() - started)


def scrape_worker(port: int) -> dict[str, dict[str, float]]:
    """From the worker's own Prometheus endpoint: seconds each stage spent processing, and how many
    texts the embedding model computed or its cache answered."""
    out: dict[str, dict[str, float]] = {"stage_busy_s": {}, "embedded_texts": {}}
    for sample in worker_samples(port):
        if sample.name == "memstream_stage_latency_seconds_sum":
            out["stage_busy_s"][sample.labels["stage"]] = round(sample.value, 2)
        elif sample.name == "memstream_embedded_texts_total":
            out["embedded_texts"][sample.labels["source"]] = sample.value
    return out


def _unique(
    messages: list[tuple[bytes | None, bytes]], parse: Callable[[bytes], Any], key: Callable[[Any], str]
) -> list[Any]:
    """Redelivery can duplicate messages on a topic; count each once."""
    seen: dict[str, Any] = {}
    for _, raw in messages:
        try:
            item = parse(raw)
        except SchemaError:
            continue
        seen.setdefault(key(item), item)
    return list(seen.values())


def run_ingest_bench(
    options: IngestOptions, *, status: Callable[[str], None] = print, on_sent: Callable[[Turn], None] | None = None
) -> dict[str, Any]:
    base = Settings()
    turns = load_turns(options)
    if not turns:
        raise ValueError("no turns to ingest")
    env = {
        "MEMSTREAM_EXTRACT_MODE": "llm" if options.llm else "extractive",
        "MEMSTREAM_COMPRESSOR_MODEL": options.compressor_model or "",
        "MEMSTREAM_LLM_BASE_URL": "",
    }
    status("measuring the raw embedding speed of the model on the same turns")
    embed_speed = raw_embedding_speed([t.text for t in turns], base)
    # Unwinds in reverse: the worker stops first, then the LLM server and the broker, if this run started them.
    with contextlib.ExitStack() as running:
        deployment = deploy_worker(running, base, options.workdir, env, llm=options.llm, status=status)
        status(f"streaming {len(turns)} turns")
        t0 = time.perf_counter()
        deployment.produce(turns, on_sent=on_sent)
        produced_s = time.perf_counter() - t0
        status("waiting until every turn is indexed")
        deployment.drain(timeout_s=3600)
        ingest_s = time.perf_counter() - t0
        worker_figures = scrape_worker(deployment.settings.metrics_port)
        endpoint, _ = llm_costs(deployment.settings.metrics_port)
        deployment.stop_workers()  # the embedded store opens only once the worker let go of it
        result = _collect(deployment, turns, options, ingest_s=ingest_s, produced_s=produced_s, embed_speed=embed_speed)
    result |= worker_figures | _endpoint_costs(endpoint.get("extract", {}), result)
    # The raw speed embeds each turn once; the write path embeds this many texts per turn.
    result["embedded_texts_per_turn"] = round(worker_figures["embedded_texts"].get("computed", 0) / len(turns), 2)
    return result


def _endpoint_costs(extract: dict[str, int], result: dict[str, Any]) -> dict[str, Any]:
    """The construction cost as the LLM endpoint saw it (``bench.deploy.llm_costs``: repairs, failed
    attempts and calls a redelivery repeated all count), per flush and per 1,000 turns."""
    calls = extract.get("calls", 0)
    tokens = extract.get("prompt_tokens", 0) + extract.get("completion_tokens", 0)
    n, flushes = result["turns"], result["flushes"]
    return {
        "llm_calls": calls,
        "llm_failed_calls": extract.get("failed_calls", 0),
        "prompt_tokens": extract.get("prompt_tokens", 0),
        "completion_tokens": extract.get("completion_tokens", 0),
        "calls_per_1k_turns": round(1000 * calls / n, 2),
        "tokens_per_1k_turns": round(1000 * tokens / n, 1),
        "calls_per_flush": round(calls / flushes, 3) if flushes else None,
        "tokens_per_call": round(tokens / calls, 1) if calls else None,
    }


def _collect(
    deployment: Deployment,
    turns: list[Turn],
    options: IngestOptions,
    *,
    ingest_s: float,
    produced_s: float,
    embed_speed: float,
) -> dict[str, Any]:
    compressed = _unique(
        deployment.read_topic("turns.compressed"), CompressedTurn.from_bytes, lambda c: c.key + c.turn.turn_id
    )
    flushes = _unique(deployment.read_topic("stm.flush"), StmFlush.from_bytes, lambda f: f.flush_id)
    writes = _unique(deployment.read_topic("cards"), MemoryWrite.from_bytes, lambda w: w.write_id)
    # What the memory writes say they cost, once per write id (a cross-check of the endpoint's count).
    calls = sum(c.calls for w in writes for c in w.costs)
    prompt = sum(c.prompt_tokens for w in writes for c in w.costs)
    completion = sum(c.completion_tokens for w in writes for c in w.costs)
    per_conversation: dict[str, dict[str, int]] = {}
    for w in writes:
        entry = per_conversation.setdefault(
            w.conversation_id, {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "flushes": 0}
        )
        entry["flushes"] += 1
        for c in w.costs:
            entry["llm_calls"] += c.calls
            entry["prompt_tokens"] += c.prompt_tokens
            entry["completion_tokens"] += c.completion_tokens
    tokens_in = sum(c.tokens_in for c in compressed)
    tokens_out = sum(c.tokens_out for c in compressed)
    with deployment.store() as store:
        points = {name: store.count(name, TENANT) for name in ("cards", "scenes", "triggers", "turns", "profiles")}
    n = len(turns)
    modes: dict[str, int] = {}
    for w in writes:
        modes[w.mode] = modes.get(w.mode, 0) + 1
    reasons: dict[str, int] = {}
    for f in flushes:
        reasons[f.reason] = reasons.get(f.reason, 0) + 1
    turns_per_s = n / ingest_s
    return {
        "mode": "llm" if options.llm else "extractive",
        "data": str(options.data),
        "conversations": sorted({t.conversation_id for t in turns}),
        "sessions_per_conversation": options.sessions,
        "turns": n,
        "turns_compressed": len(compressed),
        "flushes": len(flushes),
        "flush_reasons": reasons,
        "flushes_per_1k_turns": round(1000 * len(flushes) / n, 2),  # = LLM calls per 1k turns when none is repaired
        "segments": len({seg.segment_id for f in flushes for seg in f.segments}),
        "extractions": modes,
        "writes_llm_calls": calls,
        "writes_prompt_tokens": prompt,
        "writes_completion_tokens": completion,
        "baseline_per_turn_calls": n,
        "per_conversation": per_conversation,
        "compressor": compressed[0].compressor if compressed else "off",
        "compress_tokens_in": tokens_in,
        "compress_tokens_out": tokens_out,
        "compression_ratio": round(tokens_out / tokens_in, 4) if tokens_in else 1.0,
        "cards": points["cards"],
        "scenes": points["scenes"],
        "triggers": points["triggers"],
        "turn_points": points["turns"],
        "profile_points": points["profiles"],
        "cards_in_writes": sum(len(w.cards) for w in writes),
        "produce_s": round(produced_s, 2),
        "ingest_s": round(ingest_s, 2),
        "ingest_turns_per_s": round(turns_per_s, 2),
        "embed_sentences_per_s": round(embed_speed, 2),
        "ingest_vs_embed": round(turns_per_s / embed_speed, 3) if embed_speed else None,
    }
