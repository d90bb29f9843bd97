"""Dashboards against a real Prometheus: it scrapes two workers (two stage groups) while a
conversation streams through and questions are asked; every PromQL expression of every dashboard
must parse and return series."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from memstream.bench.deployment import free_port
from memstream.dashboards import check, evaluate, panel_queries
from memstream.streams.runtime import INFRA

from .conftest import first_sessions

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def prometheus(data_dir: Path, *targets: int) -> Iterator[str]:
    """infra/prometheus/prometheus.sh with its own port and data, scraping ``targets`` every second."""
    port = free_port()
    env = {
        **os.environ,
        "MEMSTREAM_PROMETHEUS_PORT": str(port),
        "MEMSTREAM_PROMETHEUS_DATA": str(data_dir),
        "MEMSTREAM_PROMETHEUS_SCRAPE": "1s",
    }
    script = str(INFRA / "prometheus" / "prometheus.sh")
    subprocess.run(["bash", script, "start"], env=env, check=True, capture_output=True, text=True)
    try:
        subprocess.run(
            ["bash", script, "targets", "workers", *(f"127.0.0.1:{p}" for p in targets)], env=env, check=True
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run(["bash", script, "stop"], env=env, capture_output=True)


def wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1.0)
    raise TimeoutError(what)


def test_every_dashboard_expression_returns_series_from_two_scraped_workers(make_pipeline, local_llm, tmp_path):
    conversation, turns, _ = first_sessions(2)
    # The LLM answers (and is configured everywhere, so its series exist); memories are extractive: fast.
    pipe = make_pipeline(**local_llm, MEMSTREAM_EXTRACT_MODE="extractive")
    ingest = pipe.start_worker("ingest", stages="compress,segment,stm,extract")
    store = pipe.start_worker("store", stages="index,consolidate,query")
    with prometheus(tmp_path / "prometheus", ingest.metrics_port, store.metrics_port) as url:
        wait_for(
            lambda: len(evaluate(url, 'memstream_llm_enabled{job="memstream"}')) == 2,
            60,
            "Prometheus did not scrape both workers",
        )
        pipe.produce(turns)
        pipe.produce_raw("turns", f"acme/{conversation}".encode(), b"not json")  # a dead letter
        pipe.drain()
        for profile in ("lookup", "compose", "replay"):
            assert pipe.ask(
                "What did they talk about?", tenant="acme", conversation=conversation, profile=profile, answer=False
            ).ok
        assert pipe.ask(
            "What did they talk about?", tenant="acme", conversation=conversation, answer=True, timeout_s=180
        ).ok
        # The last events' series exist for a few scrapes: a rate needs two samples in its window, so wait
        # until both workers were scraped twice since the last answer.
        since = time.time() + 2
        wait_for(
            lambda: len(evaluate(url, f'timestamp(memstream_llm_enabled{{job="memstream"}}) > {since:.3f}')) == 2,
            30,
            "Prometheus did not scrape both workers twice after the last question",
        )
        wait_for(lambda: evaluate(url, "sum(memstream_queries_total)") != [], 30, "queries not scraped")

        results = check(url)
        print("\n".join(["checked:", *(f"{r.query.dashboard} / {r.query.panel}: {r.query.promql}" for r in results)]))
        assert len(results) == len(panel_queries()) >= 30
        failed = [
            f"{r.query.dashboard} / {r.query.panel}: {r.query.promql}: {r.error or 'no series'}"
            for r in results
            if not r.ok
        ]
        assert not failed, "\n".join(failed)
        # Both workers report: the lag gauges cover the topics of both stage groups.
        topics = {r["metric"]["topic"].split(".", 1)[1] for r in evaluate(url, "memstream_consumer_lag")}
        assert {"turns", "stm.flush", "cards", "queries"} <= topics
