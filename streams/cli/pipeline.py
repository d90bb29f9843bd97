"""Running memstream: a worker, the topics, `up` / `down` (the broker, the LLM server and a worker in
the background), and `demo`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.table import Table

from memstream.client import QueryTimeout, wait_written
from memstream.datasets import load_locomo, locomo_turns
from memstream.schemas.topics import ALL_TOPICS

from .. import runtime
from ..topics import ensure_topics
from ._app import _settings, cli, console, default_demo_data, own_reading
from .memory import ask_questions, print_reply, produce_turns


@cli.command()
def worker(
    supervise: bool = typer.Option(True, help="Restart the worker when it exits for a restart (stall watchdog)"),
) -> None:
    """Run a worker for MEMSTREAM_STAGES (default: all stages) in the foreground."""
    if supervise:
        raise typer.Exit(runtime.supervise_worker())
    runtime.run_worker(_settings())


@cli.command("check-dashboards")
def check_dashboards(
    prometheus: str = typer.Option("http://127.0.0.1:9090", help="Prometheus that scrapes the workers"),
) -> None:
    """Run every PromQL expression of the Grafana dashboards (dashboards/) against a Prometheus: each
    must parse and find series. Exits 1 otherwise."""
    from memstream.dashboards import check

    results = check(prometheus)
    table = Table(title=f"{len(results)} dashboard expressions against {prometheus}")
    for column in ("dashboard", "panel", "series", "problem"):
        table.add_column(column)
    for r in results:
        table.add_row(r.query.dashboard, r.query.panel, str(r.series), r.error or ("" if r.ok else "no series"))
    console.print(table)
    bad = [r for r in results if not r.ok]
    console.print(f"{len(results) - len(bad)} of {len(results)} return series")
    if bad:
        raise typer.Exit(1)


@cli.command()
def topics() -> None:
    """Create every memstream topic on the broker (idempotent)."""
    s = _settings()
    asyncio.run(ensure_topics(s))
    console.print(f"topics ready on {s.kafka_bootstrap}: " + ", ".join(s.topic(t) for t in ALL_TOPICS))


@cli.command()
def up(
    local_llm: bool = typer.Option(
        False, "--local-llm", help="Also start the local LLM server (memstream.localllm: llama.cpp + SmolLM2)"
    ),
) -> None:
    """Start the local broker (and LLM server) and one background worker running every stage. Its
    state (store, logs, broker data) goes to MEMSTREAM_DATA_DIR, default .data in this directory."""
    s = _settings()
    with _infra_scripts():
        console.print("starting Kafka…")
        if not runtime.KAFKA.start(s):
            console.print(f"a broker already answers at {s.kafka_bootstrap}: using it")
        env = runtime.path_env(s)
        if local_llm:
            console.print("starting the local LLM server…")
            runtime.LOCAL_LLM.start(s)
            env |= runtime.local_llm_env(s)
    w = runtime.spawn_worker(env, s.data_dir / "logs" / "worker.log")
    runtime.wait_worker_ready(w)
    (s.data_dir / "worker.pid").write_text(str(w.process.pid))
    console.print(
        f"[green]memstream is up[/]: worker pid {w.process.pid}, data {s.data_dir}, log {w.log_path}, "
        f"metrics :{s.metrics_port}",
        soft_wrap=True,
    )


@contextlib.contextmanager
def _infra_scripts() -> Iterator[None]:
    """A missing infra/ script (an install without them) ends the command with what to do instead."""
    try:
        yield
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/]", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None


@cli.command()
def down() -> None:
    """Stop the background worker, the local LLM server and the local broker."""
    s = _settings()
    pid_file = s.data_dir / "worker.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, 15)
            for _ in range(60):
                os.kill(pid, 0)
                time.sleep(0.5)
        except ProcessLookupError:
            pass
        pid_file.unlink()
    with _infra_scripts():
        runtime.LOCAL_LLM.stop(s)
        runtime.KAFKA.stop(s)
    console.print("memstream is down")


DEMO_SLEEP_IDLE_S = 10 * 365 * 86400.0  # never within a demo (its first run is minutes)


@cli.command()
def demo(
    data: Optional[Path] = typer.Option(
        None,
        help="LoCoMo JSON (default: ../shared LoCoMo dev data when present, "
        "else the conversation shipped with memstream)",
    ),
    sample: Optional[str] = typer.Option(None, help="LoCoMo sample_id (default: the first)"),
    sessions: Optional[int] = typer.Option(None, help="Only the first N sessions"),
    questions: int = typer.Option(5, help="How many of its questions to ask"),
    llm: str = typer.Option("auto", help="auto (local server if installed) | local | none"),
) -> None:
    """Start everything, stream one conversation through Kafka, ask questions, stop everything."""
    s = _settings()
    path = data or default_demo_data()
    samples = load_locomo(path)
    chosen = next((x for x in samples if x.sample_id == sample), None) if sample else samples[0]
    if chosen is None:
        raise typer.BadParameter(f"no sample {sample!r} in {path}")
    tenant, conversation = "demo", chosen.sample_id
    turns = list(locomo_turns(chosen, tenant_id=tenant, conversation_id=conversation, max_sessions=sessions))
    asked_sessions = {t.turn_id.split(":")[0] for t in turns}
    qa = [
        q
        for q in chosen.qa
        if q.category in (1, 2, 3, 4) and q.evidence and all(e.split(":")[0] in asked_sessions for e in q.evidence)
    ][:questions]
    use_llm = llm == "local" or (llm == "auto" and runtime.local_llm_available())
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    # Unwinds in reverse: the worker stops first, then the LLM server and the broker, if this run started them.
    with contextlib.ExitStack() as running:
        t0 = time.perf_counter()
        console.print("[bold]1/5[/] starting Kafka (KRaft, local)…")
        with _infra_scripts():
            running.enter_context(runtime.KAFKA.session(s))
        timings["kafka_start_s"] = time.perf_counter() - t0
        # No sleep-time run in the demo's worker: an earlier demo's cards, idle for long, would
        # otherwise be consolidated first, holding the LLM server and the control partition that the
        # demo waits to drain (`memstream worker` consolidates them when it next runs).
        env = {
            **runtime.path_env(s),
            "MEMSTREAM_METRICS_PORT": str(s.metrics_port),
            "MEMSTREAM_SLEEP_IDLE_S": str(DEMO_SLEEP_IDLE_S),
        }
        if use_llm:
            t0 = time.perf_counter()
            console.print("[bold]2/5[/] starting the local LLM server (SmolLM2-135M: tiny, answers are rough)…")
            with _infra_scripts():
                running.enter_context(runtime.LOCAL_LLM.session(s))
            env |= runtime.local_llm_env(s) | {"MEMSTREAM_EXTRACT_MODE": "extractive"}
            timings["llm_start_s"] = time.perf_counter() - t0
        else:
            console.print("[bold]2/5[/] no LLM: extractive memories, evidence-only answers")
        t0 = time.perf_counter()
        console.print("[bold]3/5[/] starting a worker (all seven stages; embedded Qdrant)…")
        worker_proc = runtime.spawn_worker(env, s.data_dir / "logs" / "demo-worker.log")
        running.callback(worker_proc.stop)
        runtime.wait_worker_ready(worker_proc)
        timings["worker_start_s"] = time.perf_counter() - t0
        console.print(f"[bold]4/5[/] streaming {len(turns)} turns of {conversation} ({path.name}) through Kafka…")
        t0 = time.perf_counter()
        asyncio.run(produce_turns(s, turns))
        conversations = {(t.tenant_id, t.conversation_id) for t in turns}
        asyncio.run(wait_written(s, own_reading(s), conversations, timeout_s=600))
        timings["ingest_s"] = time.perf_counter() - t0
        console.print(f"[bold]5/5[/] asking {len(qa)} questions over memory.queries → memory.replies")
        t0 = time.perf_counter()
        answers = asyncio.run(ask_questions(s, [q.question for q in qa], tenant, conversation, "auto", 120))
        timings["questions_s"] = time.perf_counter() - t0
        hits, failed = 0, []
        for (question, reply, ms), q in zip(answers, qa):
            if isinstance(reply, QueryTimeout):
                console.print(f"[bold]{question}[/]\n[red]no reply:[/] {reply}\n")
                failed.append(question)
                continue
            print_reply(reply, question)
            if not reply.ok:
                failed.append(question)
            got = {tid for e in reply.evidence for tid in e.turn_ids}
            found = [e for e in q.evidence if e in got]
            hits += bool(found)
            console.print(
                f"gold answer: [cyan]{q.answer}[/] · gold turns {', '.join(q.evidence)} · "
                f"found in evidence: {', '.join(found) or 'none'} · {ms:.0f} ms\n"
            )
        timings["total_s"] = time.perf_counter() - t_all
        console.print(f"[bold]{hits}/{len(qa)}[/] questions had a gold turn in their evidence")
        console.print("timings: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    if failed:
        # The main job fails loudly: a question without a reply is a broken memory, not a rough answer.
        console.print(f"[red]{len(failed)} of {len(qa)} questions got no reply or an error reply[/]")
        raise typer.Exit(1)
