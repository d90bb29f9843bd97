"""Talking to memory: `ingest`, `ask`, `consolidate`, `forget`, `trace` and `export`."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import orjson
import typer
from rich.panel import Panel
from rich.table import Table

from memstream.adapters import store_problem
from memstream.client import AsyncMemoryClient, ForgetOutcome, MemstreamError, QueryTimeout, wait_written
from memstream.config import Settings
from memstream.schemas import Plan, Reply, Turn
from memstream.schemas.text import isolate_bidi

from ._app import _load_turns, _progress, _settings, cli, console, own_reading


async def produce_turns(settings: Settings, turns: list[Turn], bulk: bool = False) -> float:
    started = time.perf_counter()
    with _progress("import" if bulk else "ingest") as progress:
        task = progress.add_task("turns", total=len(turns))
        async with AsyncMemoryClient(settings, create_topics=True) as client:
            send = client.import_history if bulk else client.remember
            await send(turns, on_sent=lambda _t: progress.advance(task))
    return time.perf_counter() - started


async def watch_imports(settings: Settings, tenants: set[str], poll_s: float = 1.0) -> None:
    """A progress bar per tenant of its history imports let into the pipeline, until all are."""
    from memstream.client.history import import_progress

    with _progress("let in") as progress:
        tasks: dict[str, Any] = {}
        while True:
            left = 0
            for tenant in sorted(tenants):
                now = await import_progress(settings, tenant)
                if tenant not in tasks:
                    tasks[tenant] = progress.add_task(tenant, total=now["sent"])
                progress.update(tasks[tenant], total=now["sent"], completed=now["let_in"])
                left += now["remaining"]
            if not left:
                return
            await asyncio.sleep(poll_s)


async def _ingest_platform(
    settings: Settings, file: Path, fmt: str, tenant: str | None, conversation: str | None, bulk: bool
):
    from memstream.platforms import load_events, map_events

    mapped = map_events(fmt, load_events(fmt, file), tenant_id=tenant, conversation_id=conversation)
    async with AsyncMemoryClient(settings, create_topics=True) as client:
        outcome = await client.ingest(mapped, source=f"{fmt}:{file.name}", bulk=bulk)
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
    bulk: bool = typer.Option(
        False,
        "--bulk",
        help="A history import: onto memory.bulk.turns, let in only while live turns and questions allow, "
        "each conversation in event-time order before its live turns",
    ),
) -> None:
    """Produce a conversation's turns onto memory.turns: a LoCoMo file, or a chat platform's events
    (edits become new versions of a turn, deletions forget it, malformed events are dead-lettered).
    With --bulk, as a history import (docs/operations.md, "History import")."""
    s = _settings()
    try:
        if fmt == "locomo":
            turns = _load_turns(file, tenant or "default", conversation, sample, sessions)
            seconds = asyncio.run(produce_turns(s, turns, bulk))
            console.print(f"produced {len(turns)} turns in {seconds:.2f}s")
            conversations = {(t.tenant_id, t.conversation_id) for t in turns}
        else:
            outcome, conversations = asyncio.run(_ingest_platform(s, file, fmt, tenant, conversation, bulk))
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
        if bulk:
            asyncio.run(watch_imports(s, {tenant for tenant, _ in conversations}))
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


async def ask_questions(
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
        ask_questions(
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
                for record in _export_from_store(s, tenant, conversation):
                    write(record)
    except MemstreamError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if str(out) != "-":
        console.print(f"exported {n} records of {tenant}{'/' + conversation if conversation else ''} to {out}")


def _export_from_store(s: Settings, tenant: str, conversation: str | None) -> Iterator[dict[str, Any]]:
    """Every memory of the scope (raw turns, cards with provenance and versions, scenes, profile
    items, triggers), read from the store itself, not over Kafka. The embedded store is one
    process's: its workers stop first; a Qdrant server (``MEMSTREAM_QDRANT_URL``) needs no stop."""
    from memstream.adapters import StoreNotFound, open_existing_store
    from memstream.processors.operations.export import export_records

    try:
        store = open_existing_store(s)
    except StoreNotFound as exc:
        raise MemstreamError(str(exc)) from None
    except RuntimeError as exc:
        raise MemstreamError(f"cannot open the store: {exc}") from exc
    try:
        yield from export_records(store, tenant, conversation)
    finally:
        store.close()


def _store_busy(s: Settings) -> bool:
    """The embedded store is open in a worker (its folder lock is taken): read it over Kafka."""
    from memstream.adapters import store_locked

    return store_locked(s)


async def _export_over_kafka(s: Settings, tenant: str, conversation: str | None, write: Callable[[dict], None]) -> None:
    async with AsyncMemoryClient(s) as client:
        async for record in client.export_remote(tenant_id=tenant, conversation_id=conversation):
            write(record)
