"""``memstream bench …``: benchmark commands (they print figures and write JSON)."""

from __future__ import annotations

import functools
import inspect
import logging
import time
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.table import Table

from memstream.bench import cli_measures
from memstream.bench.cli_shared import (
    JSON_OUT,
    JSON_OUT_AND_PNG,
    LOCOMO_JSON,
    comma_ints,
    comma_list,
    console,
    exit_on_sigterm,
    print_figures,
    progress_bar,
    run_progress,
    write_json,
)
from memstream.bench.dev_data import LOCOMO_DEV, LONGMEMEVAL_DEV
from memstream.config import Settings

bench = typer.Typer(add_completion=False, no_args_is_help=True, help="Benchmarks: figures on the console and in JSON")


@bench.command("segment")
def segment(
    data: Path = typer.Option(
        LONGMEMEVAL_DEV, help="LongMemEval JSON: each question's haystack sessions become one stream"
    ),
    questions: int = typer.Option(4, min=1, help="How many questions' haystacks to stream"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Boundary precision / recall / F1 (±1 turn) of similarity-only, attention-only and hybrid segmentation."""
    from memstream.bench.segment import METHODS, run_segment_bench
    from memstream.streams.services import Services

    services = Services(Settings())
    params = services.segment_params
    with progress_bar() as progress:
        task = progress.add_task("loading models", total=questions)
        embed, attention = services.embedder.embed, services.attention
        progress.update(task, description="streaming haystacks")
        result = run_segment_bench(
            data,
            questions=questions,
            params=params,
            embed=embed,
            cohesion=attention.cohesion,
            progress=lambda _: progress.advance(task),
        )
    table = Table(
        title=f"topic boundaries, {result['questions']} LongMemEval haystacks, "
        f"{result['turns']} turns, {result['gold_boundaries']} gold boundaries (±1 turn)"
    )
    for col in ("method", "precision", "recall", "F1", "predicted"):
        table.add_column(col, justify="right" if col != "method" else "left")
    for m in METHODS:
        r = result["methods"][m]
        table.add_row(m, f"{r['precision']:.3f}", f"{r['recall']:.3f}", f"{r['f1']:.3f}", str(r["predicted"]))
    console.print(table)
    write_json(result, json_out)


@bench.command("calibrate-heads")
def calibrate_heads(
    data: Path = typer.Option(LOCOMO_DEV, help="LoCoMo JSON whose turns (no labels) calibrate the heads"),
    top_n: int = typer.Option(6, min=1, help="How many heads to keep"),
) -> None:
    """Pick the encoder heads whose turn-to-turn attention follows embedding similarity; saves them
    beside the package for the configured embedding model."""
    from memstream.adapters.encoder_attention import save_heads
    from memstream.bench.segment import calibrate_heads as calibrate
    from memstream.streams.services import Services

    services = Services(Settings())
    params = replace(services.segment_params, heads=())
    result = calibrate(
        data, params=params, embed=services.embedder.embed, cohesion=services.attention.cohesion, top_n=top_n
    )
    save_heads(services.attention.name, result)
    console.print(f"{services.attention.name}: heads {result['heads']} from {result['gaps']} gaps of {data}")


@bench.command("ingest")
def ingest(
    data: Path = LOCOMO_JSON,
    conversations: Optional[str] = typer.Option(None, help="Comma-separated sample ids (default: all in the file)"),
    sessions: Optional[int] = typer.Option(None, help="Only the first N sessions of each conversation"),
    llm: bool = typer.Option(
        False, "--llm/--extractive", help="LLM extraction against the local LLM server, or extractive"
    ),
    compressor: Optional[str] = typer.Option(
        None,
        help="LLMLingua model folder (default: MEMSTREAM_COMPRESSOR_MODEL; "
        "'smollm2' converts and uses the packaged SmolLM2, LLMLingua-1 mode)",
    ),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Stream LoCoMo conversations through the real Kafka pipeline; count calls, tokens, memories and speed."""
    from memstream.bench.ingest import IngestOptions, load_turns, run_ingest_bench

    model = compressor if compressor is not None else Settings().compressor_model
    if model == "smollm2":
        from memstream.adapters.gguf_convert import DEFAULT_SMOLLM2_HF_DIR, convert_gguf_to_hf, smollm2_gguf_path

        console.print("converting SmolLM2 from its GGUF (once)…")
        model = str(convert_gguf_to_hf(smollm2_gguf_path(), DEFAULT_SMOLLM2_HF_DIR))
    options = IngestOptions(
        data=data,
        conversations=comma_list(conversations),
        sessions=sessions,
        llm=llm,
        compressor_model=model or None,
    )
    total = len(load_turns(options))
    with run_progress(total, kafka_log_level=None) as (progress, task, status):
        result = run_ingest_bench(options, status=status, on_sent=lambda _t: progress.advance(task))
    table = Table(title=f"ingest ({result['mode']}): {result['turns']} turns of {', '.join(result['conversations'])}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key in (
        "flushes",
        "llm_calls",
        "prompt_tokens",
        "completion_tokens",
        "calls_per_1k_turns",
        "tokens_per_1k_turns",
        "calls_per_flush",
        "tokens_per_call",
        "baseline_per_turn_calls",
        "compression_ratio",
        "cards",
        "scenes",
        "triggers",
        "ingest_turns_per_s",
        "embed_sentences_per_s",
        "ingest_vs_embed",
    ):
        table.add_row(key, str(result[key]))
    console.print(table)
    write_json(result, json_out)


@bench.command("flame")
def flame(
    raw: Path = typer.Argument(..., help="py-spy record --subprocesses -f raw output (collapsed stacks; .gz too)"),
    turns: int = typer.Option(..., min=1, help="Turns the profiled run ingested (for ms per turn)"),
    rate: float = typer.Option(50.0, help="py-spy's sampling rate (-r) in Hz"),
    process: str = typer.Option("worker --no-supervise", help="Text of the profiled process's command line"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Fold a py-spy profile of a worker into the parts a turn pays for: model, Kafka, Qdrant, Python."""
    from memstream.bench.flame import fold_file, per_turn_ms

    result = fold_file(raw, process=process, rate_hz=rate)
    if not result["samples"]:
        raise typer.BadParameter(f"no samples of a process matching {process!r} in {raw}")
    result |= {"profile": str(raw), "turns": turns, "cpu_ms_per_turn": per_turn_ms(result, turns)}
    table = Table(title=f"worker CPU: {result['cpu_s']} s over {turns} turns ({result['samples']} samples)")
    for column in ("part", "CPU s", "share", "ms per turn"):
        table.add_column(column, justify="right" if column != "part" else "left")
    for name, row in result["parts"].items():
        table.add_row(name, str(row["cpu_s"]), f"{row['share']:.1%}", str(result["cpu_ms_per_turn"].get(name, "-")))
    console.print(table)
    write_json(result, json_out)


@bench.command("compare")
def compare_runs(
    results: list[Path] = typer.Argument(..., help="results.json of bench locomo/longmemeval runs, the baseline first"),
    label: list[str] = typer.Option([], "--label", help="A name per run, in order (default: its commits)"),
    json_out: Optional[Path] = JSON_OUT_AND_PNG,
) -> None:
    """Ingest speed and recall at every K of several runs on the same data, against the first."""
    from memstream.bench.compare import compare, load, plot_compare, run_summary

    loaded = load(results)
    labels = label or [run_summary(r)["commit"] for r in loaded]
    try:
        result = compare(loaded, labels)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    result["files"] = [str(p) for p in results]
    ks = list(result["runs"][0]["recall_at_k"])
    table = Table(title=f"against {result['baseline']}")
    for column in ("run", "commit", "ingest s", "turns/s", "speedup", *(f"recall K={k}" for k in ks)):
        table.add_column(column, justify="left" if column in ("run", "commit") else "right")
    for run in result["runs"]:
        recall = [f"{run['recall_at_k'].get(k, '-')} ({run['recall_change'].get(k, 0):+.3f})" for k in ks]
        table.add_row(
            run["label"], run["commit"], str(run["ingest_s"]), str(run["turns_per_s"]), f"{run['speedup']}x", *recall
        )
    console.print(table)
    write_json(result, json_out)
    if json_out:
        console.print(f"plot: {plot_compare(result, json_out.with_suffix('.png'))}")


def parse_counts(text: str, option: str = "--workers") -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``: whole numbers of at least 1, in the order given, each once."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{option} takes whole numbers separated by commas, not {text!r}") from None
    if not counts or any(c < 1 for c in counts):
        raise typer.BadParameter(f"{option} takes counts of at least 1, not {text!r}")
    return list(dict.fromkeys(counts))


@bench.command("scale")
def scale(
    data: Path = typer.Option(LOCOMO_DEV, help="LoCoMo JSON (each session is streamed as its own conversation)"),
    turns: int = typer.Option(
        1200, "--turns", "--max-turns", min=50, help="Turns to ingest in each run (whole sessions)"
    ),
    torch_threads: int = typer.Option(1, min=1, help="Model threads per worker process"),
    json_out: Optional[Path] = JSON_OUT,
    cluster: bool = typer.Option(
        False,
        "--cluster",
        help="On 3 Kafka brokers and 3 Qdrant nodes: ingest (part A) and questions (part B), "
        "with the CPU per turn and per question of every process",
    ),
    workers: Optional[str] = typer.Option(
        None, help="Ingest worker counts, comma-separated (default: 1,2; --cluster: 1,2,4)"
    ),
    store_workers: str = typer.Option("1,2", help="--cluster: store worker counts on the Qdrant cluster in part B"),
    cards: int = typer.Option(100_000, min=1, help="--cluster: cards in the store when the questions are asked"),
    questions: int = typer.Option(200, min=1, help="--cluster: questions asked per store setup (evidence only)"),
    askers: int = typer.Option(4, min=1, help="--cluster: concurrent askers"),
    embedded: bool = typer.Option(True, "--embedded/--no-embedded", help="--cluster: part B on the embedded store too"),
    workdir: Optional[Path] = typer.Option(None, help="Data folder of the deployments (and of the cluster it starts)"),
    kafka_bootstrap: Optional[str] = typer.Option(
        None, help="--cluster: use this running Kafka cluster (its brokers' CPU and disk are then not measured)"
    ),
    kafka_port: Optional[int] = typer.Option(
        None, help="--cluster: base port of the brokers it starts (default: free from 21092)"
    ),
    qdrant_url: Optional[str] = typer.Option(
        None, help="--cluster: use this running Qdrant (nodes' URLs; their CPU, RAM and disk are then not measured)"
    ),
    qdrant_port: Optional[int] = typer.Option(
        None, help="--cluster: HTTP port of the first node it starts (default: free from 31333)"
    ),
    keep_services: bool = typer.Option(False, help="--cluster: leave the brokers and nodes it started running"),
    idle_s: float = typer.Option(
        10.0, min=0.5, help="--cluster: seconds of idle CPU measured before each ingest (the processes' fixed CPU)"
    ),
    rounds: int = typer.Option(
        3, min=1, help="--cluster: part A this many times (the model's check, and its spread, over repeated runs)"
    ),
) -> None:
    """Ingest throughput of the CPU-bound stages (compress, segment, stm, extract) with 1 and 2 worker
    processes in one consumer group, on the same turns: turns_per_s_1, turns_per_s_2, speedup.
    With --cluster: turns/s with 1, 2, 4 ingest workers on a 3-broker cluster and a 3-node Qdrant
    cluster (--rounds times, each checked against the capacity model), then replies/s, p50 and p99 at
    --cards cards with 1 and 2 store workers against the server and 1 on the embedded store, each
    with the CPU-seconds per turn and per question of every process (workers, brokers, Qdrant nodes,
    this client); the costs `memstream capacity` reads."""
    from memstream.bench.scale import ScaleOptions, run_scale_bench
    from memstream.bench.scale import load_turns as scale_turns

    if cluster:
        _scale_cluster(
            data=data,
            turns=turns,
            torch_threads=torch_threads,
            json_out=json_out,
            workers=parse_counts(workers or "1,2,4"),
            store_workers=parse_counts(store_workers, "--store-workers"),
            cards=cards,
            questions=questions,
            askers=askers,
            embedded=embedded,
            workdir=workdir,
            kafka_bootstrap=kafka_bootstrap,
            kafka_port=kafka_port,
            qdrant_url=qdrant_url,
            qdrant_port=qdrant_port,
            keep_services=keep_services,
            idle_s=idle_s,
            rounds=rounds,
        )
        return
    options = ScaleOptions(data=data, max_turns=turns, torch_threads=torch_threads)
    if workers:
        options.workers = parse_counts(workers)
    result = _run_scale(run_scale_bench, options, workdir, scale_turns)
    table = Table(
        title=f"scale: {result['turns']} turns ({result['conversations']} conversations, "
        f"{result['partitions']} partitions) through {', '.join(result['stages'])}"
    )
    for column in ("workers", "seconds", "turns/s", "stm flushes"):
        table.add_column(column, justify="right")
    for run in result["runs"]:
        table.add_row(str(run["workers"]), str(run["seconds"]), str(run["turns_per_s"]), str(run["flushes"]))
    console.print(table)
    if "speedup" in result:
        console.print(f"speedup with 2 workers: {result['speedup']}x ({result['machine']})")
    write_json(result, json_out)


def _run_scale(run: Callable[..., dict], options: Any, workdir: Optional[Path], turns: Callable[[Any], list]) -> dict:
    """A scale bench (``run``) in ``workdir`` (default: the options'), under a progress bar of its
    ingested turns (the count the bench reports, once it is known)."""
    if workdir:
        options.workdir = workdir
    total = len(turns(options))
    exit_on_sigterm()
    with progress_bar() as progress:
        task = progress.add_task("starting", total=total)
        return run(
            options,
            status=lambda text: progress.update(task, description=text, completed=0),
            on_lag=lambda done, total_: progress.update(task, completed=done, total=total_),
        )


def _ms(per_unit: dict, key: str) -> str:
    value = per_unit.get(key)
    return "-" if value is None else f"{value:.1f}"


def _scale_cluster(*, json_out: Optional[Path], workdir: Optional[Path], turns: int, **kwargs) -> None:
    from memstream.bench.scale import ClusterScaleOptions, load_turns, plot_cluster, run_cluster_bench

    options = ClusterScaleOptions(max_turns=turns, **kwargs)
    result = _run_scale(run_cluster_bench, options, workdir, load_turns)
    roles: tuple[str, ...] = ("ingest", "ingest_per_worker", "store", "brokers", "qdrant", "client", "total")
    table = Table(
        title=f"scale --cluster, part A: {result['turns']} turns ({result['conversations']} conversations), "
        f"{result['kafka']['brokers']} brokers x{result['kafka']['replication_factor']} replicas, "
        f"{result['qdrant']['nodes']} Qdrant nodes; CPU-ms per turn"
    )
    columns = ("round", "ingest workers", "seconds", "turns/s", "to stored", "index ms/turn", "cards", "Kafka B/turn")
    for column in (*columns, *roles):
        table.add_column(column, justify="right")
    for run in result["ingest"]:
        per = run["cpu_ms_per_turn"]
        table.add_row(
            str(run.get("round", 1)),
            str(run["workers"]),
            str(run["seconds"]),
            str(run["turns_per_s"]),
            str(run.get("stored_turns_per_s", "")),
            str(run.get("store_lane_ms_per_turn", "")),
            str(run["cards"]),
            str(run["kafka_bytes_per_turn"]),
            *(_ms(per, r) for r in roles),
        )
    console.print(table)
    table = Table(title=f"part B: {options.questions} questions, {options.askers} askers; CPU-ms per question")
    roles = ("store", "brokers", "qdrant", "client", "total")
    for column in ("setup", "cards", "replies/s", "p50 ms", "p99 ms", "worker p50 ms", "errors", *roles):
        table.add_column(column, justify="right")
    for q in result["queries"]:
        per = q["cpu_ms_per_query"]
        table.add_row(
            q["setup"],
            str(q["cards"]),
            str(q["replies_per_s"]),
            str(q["p50_ms"]),
            str(q["p99_ms"]),
            str(q["worker_p50_ms"]),
            str(q["errors"]),
            *(_ms(per, r) for r in roles),
        )
    console.print(table)
    for run in result["ingest"]:
        net, idle = run["cpu_ms_per_turn_net"], run["idle_cpu_cores"]
        console.print(
            f"{run['workers']} ingest worker(s), net of idle CPU-ms per turn: "
            + ", ".join(f"{r} {_ms(net, r)}" for r in ("ingest", "store", "brokers", "qdrant", "client", "total"))
            + "; idle cores: "
            + ", ".join(f"{g} {idle.get(g, 0.0):.3f}" for g in ("ingest", "store", "brokers", "qdrant")),
            highlight=False,
        )
    for store, growth in result["store_growth"].items():
        console.print(f"{store} store growth: {growth}")
    for row in result.get("check", []):
        console.print(
            f"model check, round {row.get('round', 1)}, {row['workers']} ingest worker(s): measured "
            f"{row['measured_turns_per_s']} turns/s to stored, predicted {row['predicted_turns_per_s']} "
            f"(bound: {row.get('bound', '?')}; ratio {row.get('ratio', '?')}; {result['machine']})",
            highlight=False,
        )
    if "check_summary" in result:
        summary = result["check_summary"]
        console.print(
            "model check over the rounds (measured / predicted, median [min, max]): "
            + "; ".join(f"{n} worker(s) {r['median']} [{r['min']}, {r['max']}]" for n, r in summary["ratios"].items())
            + f"; every run within {summary['tolerance']:.0%}: {'yes' if summary['within'] else 'no'}",
            highlight=False,
        )
    write_json(result, json_out)
    if json_out:
        console.print(f"plot: {plot_cluster(result, json_out.with_suffix('.png'))}")


@bench.command("fuzz")
def fuzz(
    n: int = typer.Option(10_000, "--n", min=10, help="Messages to send (about 40% good turns)"),
    seed: int = typer.Option(0, help="Seed of the generator"),
    workdir: Path = typer.Option(Path(".data/bench/fuzz"), help="Data folder of the deployment"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Hostile input on turns, queries and control, interleaved with good turns: every bad message
    must be dead-lettered with its reason, every good turn stored, no worker crash."""
    from memstream.bench.fuzz import run_fuzz_bench

    with progress_bar() as progress:
        task = progress.add_task("starting", total=None)
        result = run_fuzz_bench(n, seed=seed, workdir=workdir, status=lambda t: progress.update(task, description=t))
    print_figures(
        f"fuzz: {n} messages, seed {seed}",
        result,
        (
            "sent_bad",
            "dead_lettered",
            "bad_not_dead_lettered",
            "extra_dead_letters",
            "crashes",
            "worker_restarts",
            "good_turns",
            "good_stored",
            "good_queries",
            "good_queries_answered",
        ),
    )
    write_json(result, json_out)


@bench.command("erasure")
def erasure(
    data: Optional[Path] = typer.Option(None, help="LoCoMo JSON (default: ../shared dev data when present)"),
    conversations: int = typer.Option(2, min=0, help="LoCoMo conversations (plus the packaged one)"),
    sessions: Optional[int] = typer.Option(2, help="Sessions of each LoCoMo conversation (0 = all)"),
    tenants: int = typer.Option(3, min=1, help="Every conversation streams under each of these tenants"),
    workdir: Path = typer.Option(Path(".data/bench/erasure"), help="Data folder of the deployment and the backup"),
    compaction_timeout: float = typer.Option(
        300.0, min=0, help="Seconds to wait for the log cleaner to compact the forgotten text out of the record"
    ),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Forget (a speaker, turn ids, a conversation, a tenant) while conversations stream in, then a
    kill -9 and a replay of every turn: remaining_copies (must be 0) and the forget latency; then
    the same count in the durable record, in a backup taken before the forgets once restored, and
    in the record's raw versions after compaction (each must be 0)."""
    from memstream.bench.erasure import ErasureOptions, run_erasure_bench

    options = ErasureOptions(
        data=data,
        conversations=conversations,
        sessions=sessions or None,
        tenants=tenants,
        workdir=workdir,
        compaction_timeout_s=compaction_timeout,
    )
    with progress_bar() as progress:
        task = progress.add_task("starting", total=None)
        result = run_erasure_bench(options, status=lambda text: progress.update(task, description=text))
    table = Table(title="erasure")
    for column in ("forget", "parts", "latency ms", "store points", "window/buffer turns"):
        table.add_column(column)
    for r in result["forgets"]:
        counts = r["counts"]
        points = sum(n for k, n in counts.items() if k.startswith("store:") and k != "store:repaired")
        held = counts.get("window:segmenter", 0) + counts.get("buffer:stm", 0)
        table.add_row(r["kind"], str(r["parts"]), f"{r['latency_ms']:.0f}", str(points), str(held))
    console.print(table)
    console.print(
        f"remaining copies: {result['remaining_copies']} {result['remaining_by_place']}; "
        f"kept turns {result['kept_turns_found']}/{result['kept_turns_expected']}; "
        f"dead letters {result['dead_letters']}"
    )
    console.print(
        f"record: {result['record_remaining']} copies left {result['record_remaining_by_collection']}; "
        f"restored backup: {result['restored_backup_remaining']} left "
        f"({result['restored_reconciled']} of its points reconciled away); "
        f"forgotten versions in the raw record: {result['record_forgotten_versions_before_compaction']} before "
        f"compaction, {result['record_forgotten_versions_after_compaction']} after "
        f"({result['compaction_wait_s']:.0f} s)"
    )
    write_json(result, json_out)


@bench.command("ablate")
def ablate(
    run: Path = typer.Option(..., help="A finished `memstream bench locomo --out` folder (its workers stopped)"),
    data: Path = typer.Option(LOCOMO_DEV, help="The LoCoMo JSON that run used"),
    k: int = typer.Option(10, min=1, help="Evidence K of the fixed-K variants"),
    adaptive_budget: int = typer.Option(1000, min=16, help="Token budget of the adaptive variants"),
    json_out: Optional[Path] = JSON_OUT,
    only: list[str] = typer.Option([], "--only", help="Run only the variants whose name contains this (repeatable)"),
    split: Optional[str] = typer.Option(None, help="Only this split's questions: tune (for choosing) or report"),
) -> None:
    """What each retrieval mechanism adds: every question once per variant, in process over the run's
    store, with the sentence and whole-turn baselines held to each variant's tokens; tune and report splits."""
    from memstream.bench.ablate import AblationOptions, plot_budget, run_ablation_bench, variant_count
    from memstream.bench.cases import locomo_set

    options = AblationOptions(run=run, data=data, k=k, adaptive_budget=adaptive_budget, only=tuple(only), split=split)
    questions = locomo_set(data)
    asked = [q for q in questions.questions if split is None or questions.split(q.qid) == split]
    total = len(asked) * variant_count(options)
    with progress_bar() as progress:
        task = progress.add_task("variants × questions", total=total)
        result = run_ablation_bench(options, on_question=lambda: progress.advance(task))
    for shown in ("report", "tune"):
        if split is not None and shown != split:
            continue
        table = Table(title=f"ablation, {shown} split ({result['questions'][shown]} questions), K = {k}")
        for column in (
            "variant",
            "recall",
            "answer-bearing",
            "tokens",
            "rounds",
            "best sentence baseline",
            "RRF sent.",
        ):
            table.add_column(column, justify="right")
        for name, row in result["variants"].items():
            r = row["splits"][shown]
            best = max(
                (b for b in r["baselines"] if b.endswith("sentences")),
                key=lambda b: r["baselines"][b]["evidence_recall"],
            )
            table.add_row(
                name,
                str(r["memstream"]["evidence_recall"]),
                str(r["memstream"]["answer_bearing"]),
                str(r["memstream"]["tokens"]),
                str(r["memstream"]["rounds"]),
                f"{best} {r['baselines'][best]['evidence_recall']}",
                str(r["baselines"]["rrf_sentences"]["evidence_recall"]),
            )
        console.print(table)
    write_json(result, json_out)
    if json_out and not only and split is None:  # the plot needs the fixed-K and adaptive rows
        console.print(f"plot: {plot_budget(result, json_out.with_suffix('.png'))}")


@bench.command("embed")
def embed(
    data: Path = typer.Option(LOCOMO_DEV, help="LoCoMo JSON: its turns' sentences and its questions"),
    backends: list[str] = typer.Option(["torch", "onnx", "onnx-int8"], "--backend", help="Backends (repeatable)"),
    k: int = typer.Option(10, min=1, help="Turns a dense retriever returns per question"),
    threads: int = typer.Option(1, min=1, help="CPU threads per backend (the worker's default is 1)"),
    batch_size: int = typer.Option(64, min=1),
    batch_tokens: int = typer.Option(512, min=0, help="onnx: padded tokens per forward pass at most (0 = no limit)"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Embedding backends: texts/s, agreement with torch's vectors, and dense top-K recall on LoCoMo per split."""
    from memstream.bench.embed import BACKENDS, EmbedOptions, run_embed_bench

    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise typer.BadParameter(f"unknown backend(s) {unknown}: {', '.join(BACKENDS)}")
    import torch

    torch.set_num_threads(threads)
    options = EmbedOptions(
        data=data,
        backends=tuple(backends),  # type: ignore[arg-type]
        k=k,
        threads=threads,
        batch_size=batch_size,
        batch_tokens=batch_tokens,
    )
    with console.status("embedding") as shown:
        result = run_embed_bench(options, status=shown.update)
    table = Table(
        title=f"embedding backends: {result['texts']} LoCoMo sentences ({result['mean_words']} words), "
        f"{threads} thread(s), batch {batch_size} (onnx: {batch_tokens} tokens); dense top-{k} recall"
    )
    for column in ("backend", "texts/s", "speedup", "cosine to torch (mean / min)", "recall tune", "recall report"):
        table.add_column(column, justify="right")
    for name, row in result["backends"].items():
        table.add_row(
            name,
            str(row["texts_per_s"]),
            f"{row['speedup']}x",
            f"{row['cosine_to_torch_mean']} / {row['cosine_to_torch_min']}",
            str(row["recall"]["tune"]),
            str(row["recall"]["report"]),
        )
    console.print(table)
    grid = result.get("onnx_batch_tokens")
    if grid:
        grid_table = Table(title=f"onnx: padded tokens per pass (tune split, {grid['conversations']})")
        for column in ("tokens per pass", "turns/s", "sentences/s"):
            grid_table.add_column(column, justify="right")
        for budget, row in grid.items():
            if budget not in ("conversations", "texts"):
                grid_table.add_row(budget, str(row["turns_per_s"]), str(row["sentences_per_s"]))
        console.print(grid_table)
    write_json(result, json_out)


@bench.command("profile")
def profile(
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Precision and recall of the extractive profile (is a filed sentence its speaker's own taste?)
    on labelled lines: the rules' tuning file and the held-out report file, against the old keyword rule."""
    from memstream.bench.profile import run_profile_bench

    result = run_profile_bench()
    table = Table(title="extractive profile items: statements of the speaker's own taste")
    for column in ("lines", "rule", "filed", "precision", "recall", "F1"):
        table.add_column(column, justify="right")
    for split, by_rule in result["splits"].items():
        for rule, r in by_rule.items():
            table.add_row(
                f"{split} ({r['lines']})", rule, str(r["filed"]), str(r["precision"]), str(r["recall"]), str(r["f1"])
            )
    console.print(table)
    write_json(result, json_out)


@bench.command("gateway")
def gateway(
    requests: int = typer.Option(400, min=10, help="Requests per route"),
    concurrency: int = typer.Option(8, min=1, help="Requests in flight"),
    batch: int = typer.Option(1, min=1, help="Turns per /v1/turns request"),
    workdir: Path = typer.Option(Path(".data/bench/gateway"), help="Data folder of the deployment"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the result here (and a latency PNG beside it)"),
) -> None:
    """Requests/s and p50/p99 of POST /v1/turns and POST /v1/ask through one gateway process, with a
    worker and the broker on this machine."""
    from memstream.bench.gateway import GatewayBenchOptions, plot_latencies, run_gateway_bench

    options = GatewayBenchOptions(requests=requests, concurrency=concurrency, batch=batch, workdir=workdir)
    with progress_bar() as progress:
        task = progress.add_task("starting", total=2 * requests)
        result = run_gateway_bench(
            options,
            status=lambda text: progress.update(task, description=text),
            on_request=lambda: progress.advance(task),
        )
    table = Table(title=f"gateway: {concurrency} in flight, {batch} turn(s) per /v1/turns request")
    for column in ("route", "requests", "failed", "requests/s", "p50 ms", "p99 ms"):
        table.add_column(column, justify="right")
    for route, label in (("turns", "POST /v1/turns"), ("ask", "POST /v1/ask")):
        r = result[route]
        table.add_row(
            label, str(r["requests"]), str(r["failed"]), str(r["requests_per_s"]), str(r["p50_ms"]), str(r["p99_ms"])
        )
    console.print(table)
    write_json(result, json_out)
    if json_out:
        plot_latencies(result, json_out.with_suffix(".png"))


@bench.command("freshness")
def freshness(
    data: Optional[Path] = typer.Option(
        None, help="LoCoMo JSON for the backlog run (default: ../shared dev data when present)"
    ),
    sample: Optional[str] = typer.Option(None, help="Its conversation (default: the first)"),
    backlog: bool = typer.Option(True, "--backlog/--no-backlog", help="Also the run behind a LoCoMo backlog"),
    pace_s: float = typer.Option(1.0, min=0.0, help="Seconds between streamed turns"),
    stm_idle_s: Optional[float] = typer.Option(
        None, help="MEMSTREAM_STM_IDLE_S for the worker (default: the setting's, 30 s); reported"
    ),
    fresh: bool = typer.Option(True, "--fresh/--no-fresh", help="--no-fresh: without fresh turns (a baseline)"),
    workdir: Path = typer.Option(Path(".data/bench/freshness"), help="Data folder of the deployment"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """From produce to first retrievable, p50 and p99, for the raw turn (fresh turns) and for its
    cards (after the STM flush): the packaged conversation streamed turn by turn, and the last
    session of a LoCoMo conversation streamed behind the rest of it, produced at once."""
    from memstream.bench.freshness import FreshnessOptions, probe_count, run_freshness_bench

    if data is None and backlog and LOCOMO_DEV.exists():
        data = LOCOMO_DEV
    options = FreshnessOptions(
        data=data if backlog else None,
        sample=sample,
        pace_s=pace_s,
        stm_idle_s=stm_idle_s,
        fresh_turns=fresh,
        workdir=workdir,
    )
    with run_progress(2 * probe_count(options)) as (progress, task, status):
        result = run_freshness_bench(options, status=status, on_resolved=lambda: progress.advance(task))
    settings = result["settings"]
    table = Table(
        title=f"produce -> first retrievable (s); STM idle {settings['stm_idle_s']:g}s, "
        f"turns {pace_s:g}s apart, fresh turns {'on' if settings['fresh_turns'] else 'off'}"
    )
    for column in ("run", "what", "n", "p50 s", "p99 s", "max s", "missed"):
        table.add_column(column, justify="right" if column not in ("run", "what") else "left")
    for name, run in result["runs"].items():
        label = name if not run["backlog_turns"] else f"{name} ({run['backlog_turns']} turns ahead)"
        for what in ("raw_turn", "card"):
            f = run[what]
            if f is None:
                continue
            table.add_row(label, what, str(f["n"]), str(f["p50_s"]), str(f["p99_s"]), str(f["max_s"]), str(f["missed"]))
    console.print(table)
    write_json(result, json_out)


@bench.command("llm-throughput")
def llm_throughput(
    data: Optional[Path] = typer.Option(None, help="LoCoMo JSON (default: ../shared dev data when present)"),
    conversations: int = typer.Option(2, min=1, help="Conversations of the data, each under its own tenant"),
    sessions: Optional[int] = typer.Option(None, help="Sessions of each conversation (default: all)"),
    questions: int = typer.Option(120, min=8, help="LLM-answered questions, recorded once, asked at each count"),
    in_flight: list[int] = typer.Option([1, 4, 16, 64], "--in-flight", help="Calls in flight per worker to measure"),
    copies: int = typer.Option(32, min=1, help="Copies of each conversation handed to the ingest worker (tenants)"),
    flushes_per_conversation: int = typer.Option(3, min=1, help="Flushes of each conversation (its first)"),
    latency_p50: float = typer.Option(1.2, min=0.0, help="Provider latency median, seconds"),
    latency_p99: float = typer.Option(4.0, min=0.0, help="Provider latency 99th percentile, seconds"),
    provider_concurrency: int = typer.Option(48, min=1, help="Calls at once the provider takes (429 past it)"),
    provider_rpm: float = typer.Option(0.0, min=0.0, help="Calls a minute the provider takes (0 = no limit)"),
    seed: int = typer.Option(0, help="Seed of the latency draws"),
    workdir: Path = typer.Option(Path(".data/bench/llm-throughput"), help="Data folder (the recording is kept here)"),
    json_out: Optional[Path] = JSON_OUT_AND_PNG,
) -> None:
    """LLM mode at a provider's latency: ingest turns/s (the extract stage) and LLM-answered questions/s
    (the query stage) of one worker at 1, 4, 16 and 64 calls in flight, calls and tokens per 1,000
    turns and per question, 429s, reply p50/p99, and eight questions asked at once. The LLM is the
    local model's recorded answers replayed after a drawn latency: a stand-in for a provider's timing."""
    from memstream.bench.llm_throughput import LlmThroughputOptions, plot, run_llm_throughput_bench

    options = LlmThroughputOptions(
        data=data,
        conversations=conversations,
        sessions=sessions,
        questions=questions,
        in_flight=tuple(in_flight),
        copies=copies,
        flushes_per_conversation=flushes_per_conversation,
        latency_p50_s=latency_p50,
        latency_p99_s=latency_p99,
        provider_concurrency=provider_concurrency,
        provider_rpm=provider_rpm,
        seed=seed,
        workdir=workdir,
    )
    with run_progress(None) as (_progress, _task, status):
        result = run_llm_throughput_bench(options, status=status)
    table = Table(title=f"one worker, LLM latency p50 {latency_p50:g} s / p99 {latency_p99:g} s (replayed)")
    for column in ("in flight", "ingest turns/s", "x in-flight 1", "calls/1k turns", "questions/s", "p50 s", "p99 s"):
        table.add_column(column, justify="right")
    for ingest, asked in zip(result["ingest"], result["questions"]):
        table.add_row(
            str(ingest["in_flight"]),
            f"{ingest['per_s']:g}",
            str(result["ingest_speedup"].get(str(ingest["in_flight"]), "")),
            f"{ingest['per_1000_turns']['calls']:g}",
            f"{asked['per_s']:g}",
            str(asked["p50_s"]),
            str(asked["p99_s"]),
        )
    console.print(table)
    for n, seconds in result["eight_at_once_s"].items():
        console.print(f"eight questions at once, {n} in flight, each call 1 s: replies after {seconds} s")
    write_json(result, json_out)
    if json_out:
        plot(result, json_out.with_suffix(".png"))


@bench.command("chaos")
def chaos(
    minutes: float = typer.Option(2.0, min=0.5, help="Length of the run with failures"),
    seed: int = typer.Option(0, help="Seed of the failure schedule and of the questions"),
    data: Optional[Path] = typer.Option(None, help="LoCoMo JSON (default: ../shared dev data when present)"),
    conversations: int = typer.Option(2, min=0, help="LoCoMo conversations, each under its own tenant"),
    sessions: Optional[int] = typer.Option(2, help="Sessions of each LoCoMo conversation (default 2; 0 = all)"),
    packaged_tenants: int = typer.Option(3, min=0, help="Tenants that each stream the packaged conversation"),
    llm: bool = typer.Option(False, "--llm", help="Run with the local LLM server (killed and restarted once)"),
    cluster: bool = typer.Option(
        False,
        "--cluster",
        help="A 3-broker Kafka cluster and a 3-node Qdrant cluster (a Qdrant binary: see infra/qdrant/qdrant.sh), "
        "two store workers, kill -9 of brokers and Qdrant nodes, and once of both workers of a group",
    ),
    network_faults: bool = typer.Option(
        False,
        "--network-faults",
        help="Toxiproxy (infra/toxiproxy, built with Go) in front of the run's Kafka broker, the LLM server "
        "(--llm) and the Qdrant nodes (--cluster; the embedded store has no network, and a cluster's brokers "
        "stay direct), and toxics in the schedule: added latency, a reset mid-call, a hang then close, a "
        "bandwidth limit",
    ),
    workdir: Path = typer.Option(Path(".data/bench/chaos"), help="Data folder of both deployments"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Delivery under failure: workers in two stage groups, a producer and an asker, with kill -9,
    SIGSTOP past the session timeout, a broker restart (and an LLM server restart with --llm; with
    --cluster, broker and Qdrant node kills instead of the restart; with --network-faults, toxics on the
    network), checked point by point against a run without failures: lost, duplicated, extra_points,
    unanswered."""
    from memstream.bench.chaos import ChaosOptions, chaos_turns, run_chaos_bench

    options = ChaosOptions(
        minutes=minutes,
        seed=seed,
        data=data,
        conversations=conversations,
        sessions=sessions or None,
        packaged_tenants=packaged_tenants,
        llm=llm,
        cluster=cluster,
        network_faults=network_faults,
        workdir=workdir,
    )
    total = len(chaos_turns(options)[0])
    # The producer's and the asker's clients log every refused connection while the broker restarts:
    # expected here, and counted in the result instead.
    with run_progress(total, kafka_log_level=logging.CRITICAL) as (progress, task, status):
        result = run_chaos_bench(
            options, status=status, on_progress=lambda _elapsed, sent: progress.update(task, completed=sent)
        )
    print_figures(
        f"chaos: {minutes:g} min, seed {seed}",
        result,
        (
            "kills",
            "stops",
            "rebalances",
            "broker_restarts",
            "llm_restarts",
            *(("broker_kills", "qdrant_kills", "group_kills") if cluster else ()),
            *(("proxied", "toxics") if network_faults else ()),
            "crashes",
            "turns",
            "lost",
            "duplicated",
            "extra_points",
            "missing_points",
            "dead_letters",
            "queries",
            "answered",
            "error_replies",
            "send_errors",
            "unanswered",
            "reply_p99_ms",
        ),
    )
    write_json(result, json_out)
    if json_out is not None:
        from memstream.bench.chaos import plot_timeline

        console.print(f"plot written to {plot_timeline(result, json_out.with_suffix('.png'))}")


@bench.command("retrieval")
def retrieval(
    data: Path = LOCOMO_JSON,
    conversations: Optional[str] = typer.Option(None, help="Comma-separated sample ids (default: all in the file)"),
    reply_queries: int = typer.Option(100, min=1, help="Questions asked over Kafka for the reply latency"),
    scale_cards: int = typer.Option(
        100_000, min=0, help="Grow the store to this many cards for the size test (0: skip)"
    ),
    sweep_k: str = typer.Option(
        "5,10,20,40,60", help="Evidence K values for recall against context tokens ('' = none)"
    ),
    plot: Optional[Path] = typer.Option(None, help="PNG of the sweep (default: beside --json)"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Evidence recall of adaptive / Lookup / Compose / Replay against dense and BM25 top-K over raw
    turns at the same context tokens, LoCoMo categories 1–4, extractive memories; query latency."""
    from memstream.bench.retrieval import BASELINES, METHODS, RetrievalOptions, load_questions, run_retrieval_bench
    from memstream.datasets import load_locomo

    options = RetrievalOptions(
        data=data,
        conversations=comma_list(conversations),
        reply_queries=reply_queries,
        scale_cards=scale_cards,
        sweep_k=comma_ints(sweep_k),
        plot=plot or (json_out.with_suffix(".png") if json_out else None),
    )
    samples = [s for s in load_locomo(data) if not options.conversations or s.sample_id in options.conversations]
    turns = sum(s.turn_count for s in samples)
    questions = len(load_questions(samples, options.categories))
    exit_on_sigterm()
    with progress_bar() as progress:
        task = progress.add_task("starting", total=turns)
        asked = progress.add_task("questions", total=questions * (1 + len(options.sweep_k)), visible=False)
        grown = progress.add_task("synthetic cards", total=max(scale_cards, 1), visible=False)

        def on_question() -> None:
            progress.update(asked, visible=True, advance=1)

        def on_grow(n: int) -> None:
            progress.update(grown, visible=True, advance=n)

        result = run_retrieval_bench(
            options,
            status=lambda text: progress.update(task, description=text),
            on_sent=lambda _t: progress.advance(task),
            on_question=on_question,
            on_grow=on_grow,
        )
    table = Table(
        title=f"evidence recall, {result['questions']} LoCoMo questions (categories 1–4), "
        f"{', '.join(result['conversations'])}, extractive memories"
    )
    table.add_column("method")
    for cat in result["per_category"]:
        table.add_column(f"cat {cat}", justify="right")
    for col in ("overall", "context tokens", "provenance turns/item"):
        table.add_column(col, justify="right")
    for m in (*METHODS, *BASELINES):
        overall = result["overall"][m]
        table.add_row(
            m,
            *(f"{result['per_category'][c][m]['evidence_recall']:.3f}" for c in result["per_category"]),
            f"{overall['evidence_recall']:.3f}",
            f"{overall['context_tokens']:.0f}",
            f"{overall['provenance_turns_per_evidence']:.2f}",
        )
    console.print(table)
    if result.get("sweep"):
        sweep = Table(title="recall against context tokens (baselines at the adaptive tokens of each question)")
        for col in ("K", "adaptive", "dense_topk", "bm25_topk", "tokens"):
            sweep.add_column(col, justify="right")
        for row in result["sweep"]:
            sweep.add_row(
                str(row["k"]),
                *(f"{row[m]['evidence_recall']:.3f}" for m in ("adaptive", "dense_topk", "bm25_topk")),
                f"{row['adaptive']['context_tokens']:.0f}",
            )
        console.print(sweep)
    for key in (
        "retrieval_p50_ms",
        "retrieval_p99_ms",
        "reply_p50_ms",
        "reply_worker_p50_ms",
        "retrieval_p50_ms_100k",
        "retrieval_p99_ms_100k",
        "reply_p50_ms_100k",
        "reply_p99_ms_100k",
        "reply_worker_p50_ms_100k",
        "adaptive_profiles",
    ):
        if key in result:
            console.print(f"{key}: {result[key]}")
    write_json(result, json_out)


@bench.command("consolidate")
def consolidate(
    sizes: str = typer.Option(
        "10000,50000", help="Card counts to consolidate (synthetic, see bench/consolidate.py; '' = skip)"
    ),
    parallel: int = typer.Option(4, min=1, help="Update queues decided at once"),
    longmemeval: str = typer.Option(
        str(LONGMEMEVAL_DEV) if LONGMEMEVAL_DEV.exists() else "",
        help="LongMemEval JSON for the knowledge-update measure (default: the dev set beside the repo; '' = skip)",
    ),
    tau: Optional[float] = typer.Option(
        None, help="Consolidation threshold for the knowledge-update run (default: configured)"
    ),
    k: Optional[int] = typer.Option(None, min=1, help="Evidence items per question (default: configured)"),
    reopen: Optional[Path] = typer.Option(
        None,
        help="Knowledge updates: reuse an earlier run's deployment folder "
        "(its haystacks stay ingested; consolidation is undone and run again)",
    ),
    llm_people: int = typer.Option(
        0,
        min=0,
        max=256,
        help="Also decide the life stories of this many people with "
        "the LLM (MEMSTREAM_LLM_BASE_URL, else the local server): cost per queue, agreement "
        "with the rules (0 = skip)",
    ),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Time and LLM calls to consolidate N synthetic cards (one update queue each), for growing N; and
    on LongMemEval's knowledge-update questions, newest value ranked above the stale one before and
    after consolidation, with ingestion measured while consolidation runs."""
    from memstream.bench.consolidate import GENERATOR, run_consolidate_bench

    counts = comma_ints(sizes)
    result: dict = {}
    exit_on_sigterm()
    if counts:
        with progress_bar() as progress:
            task = progress.add_task("consolidating", total=sum(counts))
            result = run_consolidate_bench(counts, parallel=parallel, progress=lambda k: progress.advance(task, k))
        table = Table(title=f"consolidation at size (rules, no LLM); generator: {GENERATOR}")
        for col in ("cards", "seconds", "cards/s", "candidates/queue", "decisions", "current cards"):
            table.add_column(col, justify="right")
        for run in result["runs"]:
            table.add_row(
                str(run["cards"]),
                f"{run['seconds']:.1f}",
                f"{run['cards_per_s']:.0f}",
                f"{run['candidates_per_queue']:.2f}",
                ", ".join(f"{k} {v}" for k, v in sorted(run["decisions"].items())),
                str(run["current_cards"]),
            )
        console.print(table)
        if "ratio" in result:
            console.print(f"seconds_50k / seconds_10k = {result['ratio']} (5x the cards; linear = 5)")
    if llm_people:
        result["llm_decider"] = _llm_decider(llm_people)
    if longmemeval.strip():
        result["knowledge_update"] = _knowledge_update(Path(longmemeval), tau, k, reopen)
    write_json(result, json_out)


def _llm_decider(people: int) -> dict:
    import contextlib

    from memstream.adapters.openai_llm import OpenAICompatibleLLM
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder
    from memstream.bench.consolidate import consolidate_stories
    from memstream.processors.consolidation.consolidate import ConsolidateParams, LlmDecider
    from memstream.streams import runtime

    settings = Settings()
    params = ConsolidateParams(tau=settings.consolidate_tau, top_n=settings.consolidate_top_n)
    with contextlib.ExitStack() as running:
        if settings.llm_base_url:
            llm = OpenAICompatibleLLM(
                settings.llm_base_url, settings.llm_model, settings.llm_api_key, timeout_s=settings.llm_timeout_s
            )
        else:
            console.print("starting the local LLM server (SmolLM2-135M)")
            running.enter_context(runtime.LOCAL_LLM.session(settings))
            llm = OpenAICompatibleLLM(
                runtime.local_llm_url(settings), "smollm2", "local", timeout_s=settings.llm_timeout_s
            )
        runtime.apply_torch_threads(settings)
        embedder = SentenceTransformerEmbedder.from_settings(settings)
        with progress_bar() as progress:
            task = progress.add_task(f"LLM decisions ({llm.model})", total=6 * people)
            run = consolidate_stories(
                people,
                # the local server keeps per-queue enums, as its workers do (local_llm_env)
                LlmDecider(llm, params, stable_schema=bool(settings.llm_base_url) and settings.llm_stable_schemas),
                embedder,
                params=params,
                progress=lambda n: progress.advance(task, n),
            )
    run["model"] = llm.model
    console.print(
        f"LLM decider ({llm.model}): {run['queues']} queues in {run['seconds']} s, {run['llm_calls']} calls, "
        f"{run['tokens_per_queue']} tokens/queue, decisions {run['decisions']}, "
        f"agreement with the rules {run['agreement_with_rules']}"
    )
    return run


def _knowledge_update(data: Path, tau: Optional[float], k: Optional[int], reopen: Optional[Path]) -> dict:
    from memstream.bench.knowledge_update import KnowledgeUpdateOptions, run_knowledge_update_bench, update_case
    from memstream.bench.longmemeval import load_longmemeval, longmemeval_turns

    questions = load_longmemeval(data)
    cases = [c for c in map(update_case, questions) if c is not None]
    turns = sum(len(longmemeval_turns(q, tenant_id="count")) for q in questions if update_case(q) is not None)
    with progress_bar() as progress:
        task = progress.add_task("starting", total=None if reopen else turns)  # a reopened run streams nothing
        asked = progress.add_task("questions", total=2 * len(cases), visible=False)
        ku = run_knowledge_update_bench(
            KnowledgeUpdateOptions(data=data, tau=tau, k=k, reopen=reopen),
            status=lambda text: progress.update(task, description=text),
            on_sent=lambda _turn: progress.advance(task),
            on_question=lambda: progress.update(asked, visible=True, advance=1),
        )
    table = Table(title=f"LongMemEval knowledge updates: {ku['questions']} questions, tau {ku['tau']}, K {ku['k']}")
    for col in ("", "newest above stale", "newest found", "stale found"):
        table.add_column(col, justify="right")
    for when in ("before", "after"):
        row = ku[when]
        table.add_row(
            f"{when} consolidation",
            f"{row['newest_above_stale']:.2f}",
            f"{row['newest_found']:.2f}",
            f"{row['stale_found']:.2f}",
        )
    console.print(table)
    console.print(
        f"versions: {ku['versions']}; consolidation {ku['consolidation_s']} s over {ku['consolidation_queues']} queues"
    )
    console.print(
        f"ingest probes: {ku['probe_alone']['tokens_per_s']} tokens/s alone, "
        f"{ku['probe_during']['tokens_per_s']} tokens/s while consolidating "
        f"(ratio {ku['ingest_during_vs_alone']}; consolidation took {ku['consolidation_wall_s']} s)"
    )
    return ku


_LLM_HELP = (
    "Answer every question with the LLM (MEMSTREAM_LLM_BASE_URL / _MODEL / _API_KEY, else the local "
    "SmolLM2 server) and judge the answers"
)
# The options both end-to-end commands take, declared once (typer reads these; they are never mutated).
E2E_OPTIONS: dict[str, Any] = {
    "extract": typer.Option("extractive", help="How memories are built: extractive (no LLM) or llm"),
    "consolidate": typer.Option(True, help="Consolidate after ingestion, as at sleep time"),
    "llm": typer.Option(False, "--llm/--no-llm", help=_LLM_HELP),
    "judge_base_url": typer.Option(
        None, help="Judge endpoint (default: the answer endpoint); key in MEMSTREAM_JUDGE_API_KEY"
    ),
    "judge_model": typer.Option(None, help="Judge model (default: the answer model)"),
    "planner": typer.Option(
        None,
        help="Query planner for the questions: auto, llm, rules or hybrid "
        "(default: configured; rules with the local LLM)",
    ),
    "k": typer.Option(None, min=1, max=100, help="Evidence items per question (default: configured)"),
    "sweep_k": typer.Option("5,10,20,40", help="K values of the recall-against-budget curve ('' = none)"),
    "sweep_tokens": typer.Option(
        "300,1000", help="Evidence-token budgets: each question asked again for its items until one ('' = none)"
    ),
    "torch_threads": typer.Option(
        1,
        min=0,
        help="Model threads of the worker (0 = every core; 1 lets its stages embed in parallel, one core each)",
    ),
    "seed": typer.Option(0, help="Seed of the question draw"),
    "split": typer.Option(
        None,
        help="Only this tuning split's questions: tune or report (the headline part; only their conversations stream)",
    ),
    "fresh": typer.Option(False, help="Start over instead of resuming what --out holds"),
}


# The shared options the run takes as they are (the sweeps are parsed; split and fresh are not the run's).
RUN_AS_GIVEN = (
    "extract",
    "consolidate",
    "llm",
    "judge_base_url",
    "judge_model",
    "planner",
    "k",
    "torch_threads",
    "seed",
)


@dataclass(frozen=True)
class E2EArgs:
    """The values of ``E2E_OPTIONS`` (same names), as a command decorated with ``e2e_command`` gets them."""

    extract: str
    consolidate: bool
    llm: bool
    judge_base_url: Optional[str]
    judge_model: Optional[str]
    planner: Optional[str]
    k: Optional[int]
    sweep_k: str
    sweep_tokens: str
    torch_threads: int
    seed: int
    split: Optional[str]
    fresh: bool

    def options(self, out: Path):  # E2EOptions, imported lazily
        """The run's options, checked (a bad one is refused before anything runs)."""
        import os

        from memstream.bench.e2e_state import E2EOptions

        if self.extract not in ("extractive", "llm"):
            raise typer.BadParameter("--extract is 'extractive' or 'llm'")
        if self.planner not in (None, "auto", "llm", "rules", "hybrid"):
            raise typer.BadParameter("--planner is 'auto', 'llm', 'rules' or 'hybrid'")
        budgets = tuple(comma_ints(self.sweep_tokens))
        if any(not 1 <= b <= 32_000 for b in budgets):
            raise typer.BadParameter("--sweep-tokens takes budgets of 1 to 32,000 evidence tokens")
        return E2EOptions(
            out=out,
            judge_api_key=os.environ.get("MEMSTREAM_JUDGE_API_KEY"),
            sweep_k=tuple(comma_ints(self.sweep_k)),
            sweep_tokens=budgets,
            **{name: getattr(self, name) for name in RUN_AS_GIVEN},
        )


def e2e_command(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``bench.command(name)`` for a command that takes, after its own options, every one of
    ``E2E_OPTIONS``: its function declares only its own and gets the shared ones as ``e2e: E2EArgs``."""
    types = typing.get_type_hints(E2EArgs)

    def register(command: Callable[..., None]) -> Callable[..., None]:
        own = [p for p in inspect.signature(command).parameters.values() if p.name != "e2e"]
        shared = [
            inspect.Parameter(option, inspect.Parameter.KEYWORD_ONLY, default=declared, annotation=types[option])
            for option, declared in E2E_OPTIONS.items()
        ]

        @functools.wraps(command)
        def with_shared(**given: Any) -> None:
            e2e = E2EArgs(**{option: given.pop(option) for option in E2E_OPTIONS})
            command(**given, e2e=e2e)

        # What typer reads: the command's own parameters, then the shared ones (and their types).
        setattr(with_shared, "__signature__", inspect.Signature([*own, *shared]))
        with_shared.__annotations__ = {p.name: command.__annotations__[p.name] for p in own} | types
        return bench.command(name)(with_shared)

    return register


def _run_e2e(bench_set, options, fresh: bool) -> None:
    from memstream.bench.e2e import Runner, Ui

    exit_on_sigterm()
    with progress_bar() as progress:
        status = progress.add_task("starting", total=None)
        ingest = progress.add_task("turns ingested", total=bench_set.turns, visible=False)
        asked = progress.add_task("questions", total=len(bench_set.questions), visible=False)

        def on_status(text: str) -> None:
            progress.update(status, description=text)
            if not console.is_terminal:  # a log file gets a line per step (a live bar draws nothing there)
                console.print(f"{time.strftime('%H:%M:%S')} {text}")

        ui = Ui(
            status=on_status,
            ingest=lambda done, total: progress.update(ingest, completed=done, total=total, visible=True),
            asked=lambda done, total: progress.update(asked, completed=done, total=total, visible=True),
        )
        result = Runner(bench_set, options, fresh=fresh, ui=ui).run()
        progress.update(status, description="done", total=1, completed=1)
    _print_e2e(result)
    console.print(f"results in {options.out}/ (results.json, report.md, {', '.join(result['plots'].values())})")


def _print_e2e(result: dict) -> None:
    from memstream.bench.report import COMPARED, METHOD_LABELS, SPLIT_TITLES

    metrics = [result["metrics"][0], result["answer_metric"]]
    split = result["splits"][result["headline_split"]]
    table = Table(
        title=f"{result['bench']}, {SPLIT_TITLES[result['headline_split']]}: {split['retrieval_scored']} questions "
        "scored, recall | answer-bearing recall at memstream's tokens"
    )
    table.add_column("group")
    for m in COMPARED:
        table.add_column(METHOD_LABELS[m], justify="right")
    rows = [("overall", split["recall"]["overall"])] + [
        (result["groups"][g]["name"], row) for g, row in split["recall"]["per_group"].items()
    ]
    # Beneath the main K's rows: each evidence-token budget, overall.
    budgets = [(f"within {entry['tokens']:,} tokens", entry["overall"]) for entry in split.get("budgets", [])]

    def cells(row: dict) -> list[str]:
        return [" | ".join(f"{row[m][x]:.3f}" if row[m][x] is not None else "–" for x in metrics) for m in COMPARED]

    for name, row in rows:
        table.add_row(name, *cells(row))
    table.add_row("context tokens", *(f"{split['recall']['overall'][m]['context_tokens']:.0f}" for m in COMPARED))
    for name, row in budgets:
        table.add_row(name, *cells(row))
    console.print(table)
    cost = result["llm_cost"]
    console.print(
        f"ingest {result['ingest']['turns_per_s']} turns/s; query p50 {result['latency_ms']['p50']} ms, "
        f"p99 {result['latency_ms']['p99']} ms; LLM calls: construction {cost['construction']['total']['calls']}, "
        f"query {cost['query']['total']['calls']}"
        + (f", judge {cost['judge']['total']['calls']}" if "judge" in cost else "")
    )
    if "answers" in result:
        a = result["answers"]["overall"]
        console.print(
            f"answers by {result['models']['answer']}, judged by {result['models']['judge']}: "
            f"accuracy {a['accuracy']} over {a['questions']} questions"
            + (f", F1 {a['f1']}, BLEU-1 {a['bleu1']}" if "f1" in a else "")
        )
        control = result["answers"]["judge_control"]
        console.print(
            f"judge control: {control['questions']} wrong answers accepted at a rate of "
            f"{control['false_accept']} (a judge worth reading accepts almost none)"
        )


_OUT_HELP = "Output folder: results.json, report.md, plots, and the run's state (a rerun resumes it)"


def _questions_option(drawn: str) -> Any:
    """`--questions` of an end-to-end bench: how the sample is drawn, and what of the data it ingests."""
    return typer.Option(None, min=1, help=f"Ask only this many questions, drawn with --seed, every {drawn}")


@e2e_command("locomo")
def locomo(
    data: Path = typer.Option(
        LOCOMO_DEV, help="LoCoMo JSON (the dev set beside the repo, or the official locomo10.json)"
    ),
    out: Path = typer.Option(Path("bench-results/locomo"), help=_OUT_HELP),
    conversations: Optional[str] = typer.Option(None, help="Comma-separated sample ids (default: all)"),
    questions: Optional[int] = _questions_option("category represented (their conversations are ingested)"),
    *,
    e2e: E2EArgs,
) -> None:
    """LoCoMo end to end: ingest through Kafka, ask over request/reply, recall per category against
    dense / BM25 / full-context baselines at the same tokens, costs, speed; with --llm, judged answers."""
    from memstream.bench.cases import locomo_set

    try:
        bench_set = locomo_set(
            data, conversations=comma_list(conversations), questions=questions, seed=e2e.seed, split=e2e.split
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    _run_e2e(bench_set, e2e.options(out), e2e.fresh)


@e2e_command("longmemeval")
def longmemeval(
    data: Path = typer.Option(
        LONGMEMEVAL_DEV, help="LongMemEval JSON (the dev set beside the repo, or the official longmemeval_s.json)"
    ),
    out: Path = typer.Option(Path("bench-results/longmemeval"), help=_OUT_HELP),
    questions: Optional[int] = _questions_option("type represented (only their haystacks are ingested)"),
    *,
    e2e: E2EArgs,
) -> None:
    """LongMemEval end to end: each question's haystack streamed as its own conversation, the question
    asked over request/reply; session and turn recall per type against the baselines, costs, speed;
    with --llm, answers judged with per-type rubrics (abstention apart)."""
    from memstream.bench.cases import longmemeval_set

    try:
        bench_set = longmemeval_set(data, questions=questions, seed=e2e.seed, split=e2e.split)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    _run_e2e(bench_set, e2e.options(out), e2e.fresh)


@bench.command("planner")
def planner(
    data: Path = LOCOMO_JSON,
    run: Optional[Path] = typer.Option(
        None, help="A finished `memstream bench locomo --out` folder holding the conversations (none: plans only)"
    ),
    conversations: str = typer.Option("conv-26,conv-41", help="Comma-separated sample ids: one tune, one report"),
    longmemeval: Optional[Path] = typer.Option(None, help="LongMemEval JSON: its questions' plans too (no recall)"),
    k: int = typer.Option(10, min=1, help="Evidence items per question"),
    json_out: Optional[Path] = JSON_OUT_AND_PNG,
) -> None:
    """LLM calls per question for each query planner mode (rules, llm, hybrid): how often the LLM plan
    differs from the rule plan, evidence recall, planner calls and latency, tune and report splits."""
    from memstream.bench.planner import MODES, TUNED, PlannerBenchOptions, plot, run_planner_bench

    ids = tuple(comma_list(conversations))
    options = PlannerBenchOptions(data=data, run=run, conversations=ids, longmemeval=longmemeval, k=k)
    with progress_bar() as progress:
        task = progress.add_task("questions × modes", total=None)
        result = run_planner_bench(options, on_question=lambda: progress.advance(task))
    for part in ("locomo", "longmemeval"):
        if part not in result:
            continue
        counts = ", ".join(f"{n} {split}" for split, n in result[part]["questions"].items())
        table = Table(title=f"{part}: planner modes ({counts} questions)")
        for column in ("mode", "split", "recall", "LLM calls / question", "plan p50 ms", "plan p99 ms", "differs"):
            table.add_column(column, justify="right")
        for mode in (*MODES, TUNED):
            for split, row in result[part]["modes"][mode].items():
                table.add_row(
                    mode,
                    split,
                    str(row.get("evidence_recall", "–")),
                    str(row["llm_calls_per_question"]),
                    str(row["plan_ms"]["p50"]),
                    str(row["plan_ms"]["p99"]),
                    str(row["differs_from_rules"]),
                )
        console.print(table)
        console.print(f"{part}: doubts worth a call on tune: {result[part]['triggers'][TUNED] or 'none'}")
    write_json(result, json_out)
    if json_out and result.get("run"):
        console.print(f"plot: {plot(result, json_out.with_suffix('.png'))}")


cli_measures.register(bench)
