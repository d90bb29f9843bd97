"""``memstream bench trace-figures``: the traces docs/observability.md shows, from a real run: Jaeger
(infra/jaeger/jaeger.sh), the local broker and LLM server, one worker with tracing on. Streams the
packaged conversation's first session, asks one question with an LLM answer, and writes the traces
of a turn, of a flush (linked to its turns) and of the question as Jaeger's API returned them (JSON)
and as waterfalls (PNG)."""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from memstream.bench.deployment import Deployment
from memstream.bench.jaeger import local_jaeger
from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.schemas import Turn
from memstream.streams import runtime
from memstream.trace_waterfall import plot_waterfall, waterfall_rows

OTLP_PORT, QUERY_PORT = 24418, 26786
TENANT = "acme"


def api(path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{QUERY_PORT}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())["data"]


def trace_or_none(trace_id: str) -> list[dict[str, Any]] | None:
    try:
        return api(f"/api/traces/{trace_id}")
    except urllib.error.HTTPError:  # not stored yet
        return None


def wait_for(find: Any, what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = find()
        if got:
            return got
        time.sleep(0.5)
    raise SystemExit(f"Jaeger never returned {what}")


def save(out: Path, name: str, trace: dict[str, Any], title: str, say: Callable[[str], None]) -> None:
    (out / f"{name}.json").write_text(json.dumps(trace, indent=1) + "\n")
    plot_waterfall(waterfall_rows(trace), out / f"{name}.png", title)
    say(f"{name}: {len(trace['spans'])} spans -> {out / name}.png")


def earliest(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """The trace whose first span started first (of the turns': the first turn's, its remember span first)."""
    return min(traces, key=lambda t: min(s["startTime"] for s in t["spans"]))


def linked_to(traces: list[dict[str, Any]], trace_ids: set[str]) -> list[dict[str, Any]]:
    """The traces with a span that references (links to) one of ``trace_ids``."""
    return [t for t in traces if any(r["traceID"] in trace_ids for s in t["spans"] for r in s["references"])]


QUESTION = "Who teaches Nora's pottery class?"  # the packaged conversation's first session answers it


def traced_run(base: Settings, traced: dict[str, str], data_dir: Path) -> tuple[list[Turn], str]:
    """The first session streamed and the question asked, on a worker with tracing on; returns the
    turns and the question's trace id."""
    sample = load_locomo(demo_conversation_path())[0]
    turns = list(locomo_turns(sample, tenant_id=TENANT, max_sessions=1))
    env = {**traced, **runtime.local_llm_env(base), "MEMSTREAM_EXTRACT_MODE": "extractive"}
    env |= {"MEMSTREAM_STM_IDLE_S": "3", "MEMSTREAM_STM_TICK_S": "1"}
    dep = Deployment(base, data_dir, env)
    dep.start_worker()
    try:
        dep.produce(turns)
        dep.drain()
        reply = dep.ask(QUESTION, tenant=TENANT, conversation=sample.sample_id, timeout_s=120)
        assert reply.ok, f"the question failed: {reply.error}"
        assert reply.trace_id, "no trace id on the reply: is tracing on?"
        return turns, reply.trace_id
    finally:
        dep.stop_workers()


def save_traces(out: Path, turns: list[Turn], question: str, say: Callable[[str], None]) -> None:
    """The first turn's trace, a flush linked to the turns and the question's, as Jaeger returns them."""
    found = wait_for(
        lambda: api(
            "/api/traces", service="memstream-client", operation="memstream.remember", limit="100", lookback="1h"
        ),
        "the turns' traces",
    )
    turn = earliest(found)
    save(out, "turn", api(f"/api/traces/{turn['traceID']}")[0], f"a turn ({turns[0].turn_id})", say)
    flushes = wait_for(
        lambda: linked_to(
            api("/api/traces", service="memstream-worker", operation="memstream.stm.flush", limit="20", lookback="1h"),
            {t["traceID"] for t in found},
        ),
        "a flush linked to the turns",
    )
    save(out, "flush", api(f"/api/traces/{flushes[0]['traceID']}")[0], "a flush of the buffered turns", say)
    question_trace = wait_for(lambda: trace_or_none(question), "the question's trace")[0]
    save(out, "question", question_trace, "a question (LLM answer)", say)


def run_trace_figures(out: Path, *, say: Callable[[str], None] = print) -> None:
    """Jaeger, the broker, the LLM server and a traced worker for one run; the three traces into ``out``."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{OTLP_PORT}", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    with local_jaeger(OTLP_PORT, QUERY_PORT, os.environ):
        os.environ.update(traced)  # this process's SDK too
        base = Settings()
        with runtime.KAFKA.session(base), runtime.LOCAL_LLM.session(base):
            with tempfile.TemporaryDirectory(prefix="memstream-traces-") as data:
                turns, question = traced_run(base, traced, Path(data))
                time.sleep(3)  # every process's batch of spans exported
                save_traces(out, turns, question, say)
