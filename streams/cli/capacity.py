"""`memstream capacity`: a deployment planned from measured costs (docs/capacity.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

from .. import runtime
from ._app import cli, console

if TYPE_CHECKING:
    from memstream.processors.operations.capacity import Assumptions, CapacityPlan, Load, MeasuredCosts

CAPACITY_RESULTS = runtime.REPO_ROOT / "docs" / "results" / "capacity"
LLM_RESULTS = runtime.REPO_ROOT / "docs" / "results" / "llm-throughput" / "llm-throughput.json"


def _bytes(n: float) -> str:
    for unit, size in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


@cli.command()
def capacity(
    turns_per_s: float = typer.Option(..., min=0, help="Turns ingested per second"),
    cards: int = typer.Option(..., min=0, help="Cards kept in Qdrant"),
    retention_days: float = typer.Option(7.0, min=0, help="Kafka topic retention (MEMSTREAM_TOPIC_RETENTION_S)"),
    queries_per_s: float = typer.Option(0.0, min=0, help="Questions per second (evidence only)"),
    results: list[Path] = typer.Option(
        [CAPACITY_RESULTS / "scale-cluster.json", CAPACITY_RESULTS / "embed-h200-cuda.json"],
        "--results",
        help="Measured costs: a `memstream bench scale --cluster --json` result, and optionally an embed-*-cuda.json",
    ),
    cpu_utilisation: float = typer.Option(0.7, min=0.05, max=1.0, help="Target busy share of every core"),
    kafka_replication: int = typer.Option(3, min=1, help="Kafka replication factor"),
    qdrant_replication: int = typer.Option(2, min=1, help="Qdrant replication factor"),
    node_ram_gib: float = typer.Option(64.0, min=1, help="RAM of one Qdrant node"),
    node_cores: int = typer.Option(8, min=1, help="Cores of one Qdrant node"),
    node_disk_tib: float = typer.Option(2.0, min=0.01, help="Disk of one Qdrant node"),
    broker_cores: int = typer.Option(8, min=1, help="Cores of one Kafka broker"),
    broker_disk_tib: float = typer.Option(4.0, min=0.01, help="Disk of one Kafka broker"),
    shards_per_node: int = typer.Option(2, min=1, help="Qdrant shards per node (room to add nodes)"),
    llm_results: Path = typer.Option(
        LLM_RESULTS,
        "--llm-results",
        help="LLM mode's measured calls and tokens (`memstream bench llm-throughput --json`); the LLM plan is "
        "left out when the default file is missing",
    ),
    llm_latency_s: Optional[float] = typer.Option(
        None, min=0.001, help="Mean seconds an LLM call takes (default: the mean of the bench's latency)"
    ),
    llm_in_flight: int = typer.Option(64, min=1, help="LLM calls in flight per worker (MEMSTREAM_LLM_IN_FLIGHT)"),
    llm_rpm: float = typer.Option(0.0, min=0, help="The provider's requests per minute for the deployment (0 = none)"),
    llm_tpm: float = typer.Option(0.0, min=0, help="The provider's tokens per minute (0 = none)"),
    llm_questions_per_s: Optional[float] = typer.Option(
        None, min=0, help="LLM-answered questions per second (default: --queries-per-s)"
    ),
    price_prompt: float = typer.Option(0.0, min=0, help="Price per million prompt tokens"),
    price_completion: float = typer.Option(0.0, min=0, help="Price per million completion tokens"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the plan, costs and assumptions here"),
) -> None:
    """Partitions, workers, cores, Kafka brokers and disk, Qdrant nodes, shards and RAM for a load,
    from measured costs (docs/capacity.md); with an LLM, the workers its waits need, calls, tokens,
    the provider's limits and the cost. Needs no running service."""
    import json
    from dataclasses import asdict

    from memstream.processors.operations.capacity import Assumptions, Load, measured_costs, plan

    scale_result, embed_result, sources = _read_results(results)
    costs = measured_costs(scale_result, embed=embed_result, source=", ".join(sources))
    load = Load(turns_per_s=turns_per_s, cards=cards, retention_days=retention_days, queries_per_s=queries_per_s)
    assume = Assumptions(
        cpu_utilisation=cpu_utilisation,
        kafka_replication=kafka_replication,
        qdrant_replication=qdrant_replication,
        qdrant_node_ram_gib=node_ram_gib,
        qdrant_node_cores=node_cores,
        qdrant_node_disk_tib=node_disk_tib,
        broker_cores=broker_cores,
        broker_disk_tib=broker_disk_tib,
        shards_per_node=shards_per_node,
    )
    result = plan(costs, load, assume)
    _print_plan(result, costs, load, assume)
    _print_assumptions(assume, costs, scale_result)
    out = {"load": asdict(load), "assumptions": asdict(assume), "costs": asdict(costs), "plan": result.as_dict()}
    if llm_results.exists() or llm_results != LLM_RESULTS:
        out["llm"] = _llm_capacity(
            llm_results,
            turns_per_s,
            queries_per_s if llm_questions_per_s is None else llm_questions_per_s,
            latency_s=llm_latency_s,
            in_flight=llm_in_flight,
            rpm=llm_rpm,
            tpm=llm_tpm,
            prices=(price_prompt, price_completion),
        )
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(out, indent=2) + "\n")
        console.print(f"JSON written to {json_out}")


def _read_results(results: list[Path]) -> tuple[dict, dict | None, list[str]]:
    """The ``bench scale --cluster`` result and the embedder result (if any) among ``results``, and
    the files read; exit 2 on a missing or unknown file (the default embedder result may be missing)."""
    import json

    scale_result, embed_result, sources = None, None, []
    for path in results:
        if not path.exists():
            if path.parent == CAPACITY_RESULTS and path.name == "embed-h200-cuda.json":
                continue
            console.print(f"[red]{path} not found: run `memstream bench scale --cluster --json {path}` first[/]")
            raise typer.Exit(2)
        data = json.loads(path.read_text())
        if "precisions" in data:
            embed_result = data
        elif data.get("mode") == "cluster":
            scale_result = data
        else:
            console.print(f"[red]{path} is neither a `bench scale --cluster` result nor an embedder result[/]")
            raise typer.Exit(2)
        sources.append(str(path))
    if scale_result is None:
        console.print("[red]no `bench scale --cluster` result among --results[/]")
        raise typer.Exit(2)
    return scale_result, embed_result, sources


def _print_table(title: str, rows: list[tuple[str, str, str]]) -> None:
    """A plan as a table: what, how much is needed, and what that comes from."""
    table = Table(title=title)
    table.add_column("what")
    table.add_column("needed", justify="right")
    table.add_column("from")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_plan(result: CapacityPlan, costs: MeasuredCosts, load: Load, assume: Assumptions) -> None:
    """The CPU plan's table."""
    rows = [
        ("topic partitions", str(result.partitions), result.limits["partitions"]),
        ("ingest workers (1 core each)", str(result.ingest_workers), f"{costs.ingest_cpu_ms_per_turn:.1f} CPU-ms/turn"),
        (
            "store workers (1 core each)",
            str(result.store_workers),
            f"{costs.store_cpu_ms_per_turn:.1f} CPU-ms/turn, {costs.query_cpu_ms:.1f} CPU-ms/question",
        ),
        ("Kafka brokers", str(result.brokers), f"limited by {result.limits['brokers']}"),
        ("Kafka broker cores", f"{result.broker_cores:,.1f}", f"{costs.broker_cpu_ms_per_turn:.2f} CPU-ms/turn"),
        (
            "Kafka disk (all replicas)",
            _bytes(result.kafka_disk_bytes),
            f"{costs.kafka_bytes_per_turn:,.0f} B/turn per copy x {assume.kafka_replication}",
        ),
        ("Qdrant nodes", str(result.qdrant_nodes), f"limited by {result.limits['qdrant_nodes']}"),
        ("Qdrant shards per collection", str(result.qdrant_shards), f"{assume.shards_per_node} per node"),
        ("Qdrant cores", f"{result.qdrant_cores:,.1f}", f"{costs.qdrant_cpu_ms_per_turn:.2f} CPU-ms/turn"),
        (
            "Qdrant RAM (all replicas)",
            _bytes(result.qdrant_ram_bytes),
            f"{costs.qdrant_ram_bytes_per_card:,.0f} B/card per copy x {assume.qdrant_replication}",
        ),
        ("Qdrant RAM per node", _bytes(result.qdrant_ram_per_node_bytes), f"of {assume.qdrant_node_ram_gib:g} GiB"),
        (
            "Qdrant disk (all replicas)",
            _bytes(result.qdrant_disk_bytes),
            f"{costs.qdrant_disk_bytes_per_card:,.0f} B/card per copy x {assume.qdrant_replication}",
        ),
        ("cores in all", f"{result.total_cores:,.1f}", "workers + brokers + Qdrant"),
    ]
    if result.embed_gpus is not None:
        rows.append(
            (
                "GPUs, if the embedder runs on them",
                str(result.embed_gpus),
                f"{costs.embed_gpu_turns_per_s:,.0f} turns/s per GPU (workers' CPU then drops)",
            )
        )
    _print_table(
        f"capacity for {load.turns_per_s:,.0f} turns/s, {load.queries_per_s:,.0f} questions/s, {load.cards:,} cards, "
        f"{load.retention_days:g} days of Kafka retention",
        rows,
    )


def _print_assumptions(assume: Assumptions, costs: MeasuredCosts, scale_result: dict) -> None:
    """What the plan assumed, and the measuring run's check of the model."""
    console.print(
        f"assumptions: {assume.cpu_utilisation:.0%} CPU utilisation, {assume.ram_utilisation:.0%} of a node's RAM and "
        f"{assume.disk_utilisation:.0%} of a disk used, Kafka replication {assume.kafka_replication}, Qdrant "
        f"replication {assume.qdrant_replication}, costs linear in the load (measured on one machine: "
        f"{scale_result.get('machine')}); costs from {costs.source}",
        highlight=False,
    )
    for row in scale_result.get("check", []):
        console.print(
            f"check, round {row.get('round', 1)}, {row['workers']} ingest worker(s) on the measuring machine: "
            f"measured {row['measured_turns_per_s']} turns/s, the model {row['predicted_turns_per_s']}",
            highlight=False,
        )


def _llm_capacity(
    results: Path,
    turns_per_s: float,
    questions_per_s: float,
    *,
    latency_s: float | None,
    in_flight: int,
    rpm: float,
    tpm: float,
    prices: tuple[float, float],
) -> dict:
    """Print and return the LLM mode's plan (``processors.capacity.llm_plan``) from a bench result."""
    import json
    import math

    from memstream.processors.operations.capacity import LlmProvider, llm_costs, llm_plan

    if not results.exists():
        console.print(f"[red]{results} not found: run `memstream bench llm-throughput --json {results}` first[/]")
        raise typer.Exit(2)
    measured = json.loads(results.read_text())
    costs = llm_costs(measured, source=str(results))
    if latency_s is None:  # the mean of the bench's lognormal latency, from its median and 99th percentile
        o = measured["options"]
        sigma = math.log(o["latency_p99_s"] / o["latency_p50_s"]) / 2.3263 if o["latency_p50_s"] else 0.0
        latency_s = o["latency_p50_s"] * math.exp(sigma**2 / 2)
    provider = LlmProvider(
        latency_s=latency_s,
        in_flight=in_flight,
        rpm=rpm,
        tpm=tpm,
        price_prompt_per_m=prices[0],
        price_completion_per_m=prices[1],
    )
    result = llm_plan(costs, provider, turns_per_s, questions_per_s)
    per_k = costs.extract_calls_per_1000_turns
    rows = [
        ("extract workers (LLM-bound)", str(result.extract_workers), result.limits["workers"]),
        ("query workers (LLM-bound)", str(result.query_workers), result.limits["workers"]),
        (
            "LLM calls/s",
            f"{result.calls_per_s:,.1f}",
            f"{per_k:.1f} calls/1,000 turns, {costs.answer_calls_per_question:.2f}/question",
        ),
        ("calls in flight, all workers", f"{result.calls_in_flight:,.0f}", "calls/s x latency"),
        ("prompt tokens/s", f"{result.prompt_tokens_per_s:,.0f}", ""),
        ("completion tokens/s", f"{result.completion_tokens_per_s:,.0f}", ""),
        ("requests/min, tokens/min", f"{result.requests_per_min:,.0f}, {result.tokens_per_min:,.0f}", ""),
        (
            "share of the provider's rpm, tpm",
            f"{result.limit_share['rpm']:.0%}, {result.limit_share['tpm']:.0%}",
            "within the limits" if result.within_limits else "OVER the limits",
        ),
        (
            "turns/s the limits allow",
            "no limit" if result.max_turns_per_s is None else f"{result.max_turns_per_s:,.0f}",
            "beside the questions",
        ),
        ("cost per hour", f"{result.cost_per_hour:,.2f}", f"at {prices[0]:g} / {prices[1]:g} per million tokens"),
    ]
    _print_table(
        f"LLM mode: {turns_per_s:,.0f} turns/s extracted, {questions_per_s:,.0f} questions/s answered, "
        f"{latency_s:.2f} s a call, {in_flight} in flight per worker",
        rows,
    )
    console.print(
        f"the workers are the LLM waits' alone: each group needs the larger of these and its CPU plan above; "
        f"calls and tokens from {costs.source}",
        highlight=False,
    )
    return {"provider": provider.__dict__, "costs": costs.__dict__, "plan": result.as_dict()}
