"""``memstream bench`` commands behind single figures the docs cite (they were scripts once): each
measures one thing, in process or on a run's store, prints it and writes it as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from memstream.bench.cli_shared import JSON_OUT, JSON_OUT_AND_PNG, LOCOMO_JSON, write_json
from memstream.bench.dev_data import LOCOMO_DEV
from memstream.streams.runtime import REPO_ROOT


def _show(result: dict[str, Any], json_out: Optional[Path]) -> None:
    typer.echo(json.dumps(result, indent=2))
    write_json(result, json_out)


def _one_of(value: str, choices: tuple[str, ...], option: str) -> str:
    if value not in choices:
        raise typer.BadParameter(f"{option} is one of {', '.join(choices)}, not {value!r}")
    return value


def changelog_bytes(
    data: Path = typer.Argument(LOCOMO_DEV, help="LoCoMo JSON"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Bytes each turn writes to the segmenter's and the STM's changelogs, and the CPU of sending that
    many over loopback TCP (extractive, today's state layout; no model)."""
    from memstream.bench.changelog_bytes import run_changelog_bytes

    _show(run_changelog_bytes(data), json_out)


def content_query_grid(
    run: Path = typer.Argument(..., help="A finished `memstream bench locomo --out` folder (its workers stopped)"),
    data: Path = typer.Option(LOCOMO_DEV, help="The LoCoMo JSON that run used"),
    split: str = typer.Option("tune", help="tune, report or all"),
    json_out: Path = typer.Option(..., "--json", help="Write the result here"),
) -> None:
    """The grid the content query and the graph's per-item budget were chosen on: each row's recall and
    tokens in process over the run's store, with the sentence baselines at the same tokens."""
    from memstream.bench.content_query_grid import run_content_query_grid

    write_json(run_content_query_grid(run, data, _one_of(split, ("tune", "report", "all"), "--split")), json_out)


embed_device = typer.Typer(
    no_args_is_help=True,
    help="The torch embedder's cost on one device: texts/s by batch size and precision, one text's latency, "
    "cosine to the CPU's vectors (prepare here, measure where the device is)",
)


@embed_device.command("prepare")
def embed_device_prepare(
    data: Path = typer.Option(..., help="LoCoMo JSON"),
    out: Path = typer.Option(..., help="Folder for texts.json and reference.npy"),
    model: Optional[str] = typer.Option(None, help="Embedding model (default: memstream's)"),
) -> None:
    """The texts (LoCoMo turns and their sentences) and the CPU's float32 vectors of the first 1,000."""
    from memstream.bench.embed_device import prepare

    prepare(data, out, model)


@embed_device.command("measure")
def embed_device_measure(
    texts: Path = typer.Option(..., help="prepare's texts.json"),
    reference: Optional[Path] = typer.Option(None, help="Vectors of the first texts, to compare with"),
    model: Optional[str] = typer.Option(None, help="Embedding model name or folder (default: memstream's)"),
    device: str = typer.Option("cpu", help="torch device: cpu, cuda, cuda:1, ..."),
    precisions: str = typer.Option("float32", help="Comma-separated: float32, float16"),
    batches: str = typer.Option("1,16,64,256", help="Comma-separated batch sizes"),
    small: int = typer.Option(500, help="Texts timed at batch sizes under 16"),
    single: int = typer.Option(300, help="One-text calls timed for the latency"),
    limit: int = typer.Option(0, help="Only the first N texts (0 = all)"),
    repeats: int = typer.Option(3, help="Passes per batch size (the best counts)"),
    threads: int = typer.Option(1, help="torch CPU threads"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Texts/s at each batch size and precision, one text's p50 / p99, cosine to the reference, peak GPU memory."""
    given = dict(locals())  # the parameters: DeviceOptions' fields, and --json
    from memstream.bench.embed_device import DeviceOptions, measure

    json_out = given.pop("json_out")
    _show(measure(DeviceOptions(**given)), json_out)


def fill_recall(
    bench_name: str = typer.Argument(..., metavar="BENCH", help="locomo or longmemeval"),
    run: Path = typer.Argument(..., help="The bench's --out folder (its deployment/ holds the store)"),
    split: str = typer.Argument(..., help="tune or report"),
    variants: str = typer.Argument(..., help="JSON: variant name -> RetrievalParams overrides"),
    data: Optional[Path] = typer.Option(None, help="The data that run used (default: the bench's dev set)"),
    baselines: bool = typer.Option(
        False,
        help="Also the same-run baselines (whole raw turns and their sentences), each held to memstream's "
        "evidence tokens per question in that variant and budget, as the benches hold them",
    ),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Recall of a finished locomo / longmemeval run's store, in process, at K = 10 and filled to 300 /
    1,000 evidence tokens as the benches ask over Kafka, for RetrievalParams variants."""
    from memstream.bench.fill_recall import DATA, run_fill_recall

    result = run_fill_recall(
        _one_of(bench_name, tuple(sorted(DATA)), "BENCH"),
        run,
        _one_of(split, ("tune", "report"), "SPLIT"),
        variants,
        data=data,
        baselines=baselines,
    )
    write_json(result, json_out)


def grammar_speed(
    data: Path = LOCOMO_JSON,
    turns: int = typer.Option(40, min=1, help="The first N turns of the first conversation"),
    max_tokens: int = typer.Option(300, min=1, help="Tokens the extraction call may generate"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Decode speed of a grammar-constrained extraction call on the local LLM (SmolLM2), the grammar
    checked after sampling (memstream's engine) and before top-k (the library's chain): same tokens."""
    from memstream.bench.grammar_speed import run_grammar_speed

    _show(run_grammar_speed(data, turns=turns, max_tokens=max_tokens), json_out)


def prompt_tokens(
    data: Path = LOCOMO_JSON,
    conversation: int = typer.Option(0, min=0, help="Index of the sample in the file"),
    sessions: int = typer.Option(10, min=1, help="Its first N sessions (one topic each)"),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Prompt tokens per turn of the extraction call as SmolLM2 tokenizes them: a timestamp on every
    turn (before 2026-12-02) against the date once per day (now)."""
    from memstream.bench.prompt_tokens import run_prompt_tokens

    _show(run_prompt_tokens(data, conversation=conversation, sessions=sessions), json_out)


def query_steps(
    data_dir: Path = typer.Argument(..., help="A deployment's data folder (its qdrant-edge/ is read)"),
    data: Path = typer.Option(LOCOMO_DEV, help="LoCoMo JSON: the questions"),
    questions: int = typer.Option(100, min=1, help="Questions spread over the file"),
    drop_index: list[str] = typer.Option(
        [], "--drop-index", help="Payload index to remove from the cards first (repeatable)"
    ),
    json_out: Optional[Path] = JSON_OUT,
) -> None:
    """Where a query's time goes, in process over a run's store: each engine step and each kind of
    store search, p50 / p90 / max, K = 10, no LLM."""
    from memstream.bench.query_steps import run_query_steps, summary_lines

    result = run_query_steps(data_dir, data=data, questions=questions, drop_index=drop_index)
    for line in summary_lines(result):
        typer.echo(line)
    write_json(result, json_out)


def startup(
    runs: int = typer.Option(5, min=1, help="Starts of each stage set"),
    stage_sets: str = typer.Option("all,ingest", help="Comma-separated: all (every stage), ingest (compress..extract)"),
    workdir: Path = typer.Option(Path(".data/bench/startup"), help="Data folders of the deployments"),
    json_out: Optional[Path] = JSON_OUT_AND_PNG,
) -> None:
    """A `memstream worker`'s start, supervisor included, to the first turn handled: p50 and max of each
    phase (the worker's start-up marks) over RUNS starts, each in a fresh deployment on the running broker."""
    from memstream.bench.cli_shared import comma_list, run_progress
    from memstream.bench.startup import STAGE_SETS, StartupOptions, plot_startup, run_startup, summary_lines

    chosen = tuple(_one_of(name, tuple(STAGE_SETS), "--stage-sets") for name in comma_list(stage_sets))
    options = StartupOptions(runs=runs, stage_sets=chosen, workdir=workdir)
    with run_progress(None) as (_progress, _task, status):
        result = run_startup(options, status=status)
    for line in summary_lines(result):
        typer.echo(line)
    write_json(result, json_out)
    if json_out:
        typer.echo(f"plot: {plot_startup(result, json_out.with_suffix('.png'))}")


def trace_figures(
    out: Path = typer.Option(Path("docs/results/tracing"), help="Folder of the traces (JSON) and waterfalls (PNG)"),
) -> None:
    """The traces docs/observability.md shows (a turn, a flush linked to its turns, a question with an
    LLM answer), from a real run with Jaeger, the local broker and LLM server and a traced worker."""
    from memstream.bench.trace_figures import run_trace_figures

    run_trace_figures(out)


def tracing_overhead(
    before: str = typer.Option("1ca49c3", help="The release before tracing (git revision)"),
    rounds: int = typer.Option(3, min=1, help="Rounds of the three runs"),
    conversations: str = typer.Option("conv-26,conv-30", help="Comma-separated sample ids"),
    data: Path = LOCOMO_JSON,
    json_out: Path = typer.Option(
        REPO_ROOT / "docs" / "results" / "tracing" / "overhead.json", "--json", help="Write the result here"
    ),
) -> None:
    """What tracing costs the write path: `bench ingest` with tracing off, off on the release before
    tracing, and on into a local Jaeger, alternating round after round; the ratios of the medians."""
    from memstream.bench.tracing_overhead import run_tracing_overhead

    result = run_tracing_overhead(before=before, rounds=rounds, conversations=conversations, data=data)
    write_json(result, json_out)
    typer.echo(json.dumps({k: v for k, v in result.items() if k not in ("runs", "what")}))


def register(app: typer.Typer) -> None:
    """These commands, added to ``memstream bench``."""
    from memstream.bench.cli_drill import drill
    from memstream.bench.cli_fairness import fairness
    from memstream.bench.cli_soak import soak

    app.command("changelog-bytes")(changelog_bytes)
    app.command("content-query-grid")(content_query_grid)
    app.command("drill")(drill)
    app.command("fairness")(fairness)
    app.add_typer(embed_device, name="embed-device")
    app.command("fill-recall")(fill_recall)
    app.command("grammar-speed")(grammar_speed)
    app.command("prompt-tokens")(prompt_tokens)
    app.command("query-steps")(query_steps)
    app.command("soak")(soak)
    app.command("startup")(startup)
    app.command("trace-figures")(trace_figures)
    app.command("tracing-overhead")(tracing_overhead)
