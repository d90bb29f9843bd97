"""The traces docs/observability.md shows, from a real run: Jaeger (infra/jaeger/jaeger.sh), the
local broker and LLM server, one worker with tracing on. Streams the packaged conversation's first
session, asks one question with an LLM answer, and writes the traces of a turn, of a flush (linked to
its turns) and of the question as Jaeger's API returned them (JSON) and as waterfalls (PNG).

    .venv/bin/python scripts/trace_figures.py [--out docs/results/tracing]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from memstream.bench.deployment import Deployment
from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.streams import runtime
from memstream.trace_waterfall import plot_waterfall, waterfall_rows

OTLP_PORT, QUERY_PORT = 24418, 26786


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


def save(out: Path, name: str, trace: dict[str, Any], title: str) -> None:
    (out / f"{name}.json").write_text(json.dumps(trace, indent=1) + "\n")
    plot_waterfall(waterfall_rows(trace), out / f"{name}.png", title)
    print(f"{name}: {len(trace['spans'])} spans -> {out / name}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/tracing"))
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    jaeger_env = {
        **os.environ,
        "MEMSTREAM_JAEGER_DATA": tempfile.mkdtemp(prefix="memstream-jaeger-"),
        "MEMSTREAM_JAEGER_OTLP_PORT": str(OTLP_PORT),
        "MEMSTREAM_JAEGER_QUERY_PORT": str(QUERY_PORT),
    }
    jaeger = str(runtime.INFRA / "jaeger" / "jaeger.sh")
    subprocess.run(["bash", jaeger, "start"], env=jaeger_env, check=True)
    traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{OTLP_PORT}", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    os.environ.update(traced)  # this process's SDK too
    base = Settings()
    tenant = "acme"
    sample = load_locomo(demo_conversation_path())[0]
    turns = list(locomo_turns(sample, tenant_id=tenant, max_sessions=1))
    try:
        with runtime.KAFKA.session(base), runtime.LOCAL_LLM.session(base):
            with tempfile.TemporaryDirectory(prefix="memstream-traces-") as data:
                env = {**traced, **runtime.local_llm_env(base), "MEMSTREAM_EXTRACT_MODE": "extractive"}
                env |= {"MEMSTREAM_STM_IDLE_S": "3", "MEMSTREAM_STM_TICK_S": "1"}
                dep = Deployment(base, Path(data), env)
                dep.start_worker()
                try:
                    dep.produce(turns)
                    dep.drain()

                    async def ask() -> str:
                        async with AsyncMemoryClient(dep.settings) as client:
                            reply = await client.ask(
                                "Who teaches Nora's pottery class?",
                                tenant_id=tenant,
                                conversation_id=sample.sample_id,
                                timeout_s=120,
                            )
                        assert reply.trace_id, "no trace id on the reply: is tracing on?"
                        return reply.trace_id

                    question = asyncio.run(ask())
                    time.sleep(3)  # every process's batch of spans exported
                    first = turns[0]
                    found = wait_for(
                        lambda: api(
                            "/api/traces",
                            service="memstream-client",
                            operation="memstream.remember",
                            limit="100",
                            lookback="1h",
                        ),
                        "the turns' traces",
                    )
                    turn_traces = {t["traceID"] for t in found}
                    # The first turn's trace: its remember span comes first.
                    turn = min(found, key=lambda t: min(s["startTime"] for s in t["spans"]))
                    save(out, "turn", api(f"/api/traces/{turn['traceID']}")[0], f"a turn ({first.turn_id})")
                    flushes = wait_for(
                        lambda: [
                            t
                            for t in api(
                                "/api/traces",
                                service="memstream-worker",
                                operation="memstream.stm.flush",
                                limit="20",
                                lookback="1h",
                            )
                            if any(r["traceID"] in turn_traces for s in t["spans"] for r in s["references"])
                        ],
                        "a flush linked to the turns",
                    )
                    save(out, "flush", api(f"/api/traces/{flushes[0]['traceID']}")[0], "a flush of the buffered turns")
                    save(
                        out,
                        "question",
                        wait_for(lambda: trace_or_none(question), "the question's trace")[0],
                        "a question (LLM answer)",
                    )
                finally:
                    dep.stop_workers()
    finally:
        subprocess.run(["bash", jaeger, "stop"], env=jaeger_env, check=False)


if __name__ == "__main__":
    main()
