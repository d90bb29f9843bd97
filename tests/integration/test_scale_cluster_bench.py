"""`memstream bench scale --cluster` end to end at a tiny size: it starts its own 3 brokers and 3
Qdrant nodes (ports from 21092 and 31333), ingests with 1 ingest worker, grows the store,
asks with 1 and 2 store workers and on the embedded store, and writes every figure. Tiny inputs (a
few dozen turns, one round, one ingest worker count, a few hundred cards): it checks that the bench
runs and fills every field; the full-size run is ``memstream bench scale --cluster`` with its
committed results."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memstream.bench.scale import IDLE_GROUPS
from memstream.processors.operations.capacity import Load, measured_costs, plan
from memstream.streams import runtime

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CARDS, QUESTIONS = 300, 8


@pytest.mark.timeout(300)
def test_the_cluster_bench_writes_every_figure(tmp_path: Path):
    out = tmp_path / "scale.json"
    args = ["--workers", "1", "--max-turns", "50", "--cards", f"{CARDS}", "--questions", f"{QUESTIONS}"]
    args += ["--askers", "2", "--idle-s", "1", "--rounds", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "memstream.streams.cli", "bench", "scale", "--cluster", *args]
        + ["--workdir", str(tmp_path / "work"), "--json", str(out)],
        cwd=runtime.REPO_ROOT,
        # The tails flush after 2 idle seconds (30 by default): "stored" is reached by an idle flush.
        env={**os.environ, "MEMSTREAM_STM_IDLE_S": "2", "MEMSTREAM_STM_TICK_S": "1"},
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert result["kafka"]["brokers"] == 3 and result["kafka"]["replication_factor"] == 3
    assert result["qdrant"]["nodes"] == 3
    assert [(r["round"], r["workers"]) for r in result["ingest"]] == [(1, 1)]
    for run in result["ingest"]:
        assert run["turns_per_s"] > 0 and run["cards"] > 0 and run["kafka_bytes_per_turn"] > 0
        # every stage done comes after the front topics are drained; the index stage was busy
        assert run["stored_s"] >= run["seconds"] and run["stored_turns_per_s"] <= run["turns_per_s"]
        assert run["store_lane_ms_per_turn"] == max(run["store_busy_ms_per_turn"].values()) > 0
        roles = {f"ingest-{i + 1}" for i in range(run["workers"])} | {"store-1", "client"}
        roles |= {f"broker-{i}" for i in (1, 2, 3)} | {f"qdrant-{i}" for i in (1, 2, 3)}
        assert set(run["cpu_s"]) == roles
        # the workers are the bench's children: their CPU is theirs, not the client's too (bench/cpu.py)
        workers = sum(v for k, v in run["cpu_s"].items() if k.startswith(("ingest-", "store-")))
        assert run["cpu_s"]["client"] < workers
        for figures in (run["cpu_ms_per_turn"], run["cpu_ms_per_turn_net"]):
            assert set(figures) >= {*IDLE_GROUPS, "client", "total", "ingest_per_worker"}
            assert figures["ingest"] > 0 and figures["brokers"] > 0 and figures["qdrant"] > 0
        assert set(run["idle_cpu_cores"]) >= set(IDLE_GROUPS)
    assert [q["setup"] for q in result["queries"]] == ["server-1", "server-2", "embedded-1"]
    for q in result["queries"]:
        assert q["cards"] == CARDS and q["errors"] == 0 and q["questions"] == QUESTIONS
        assert q["replies_per_s"] > 0 and 0 < q["p50_ms"] <= q["p99_ms"]
        assert q["cpu_ms_per_query"]["store"] > 0 and q["cpu_ms_per_query"]["brokers"] > 0
    assert result["queries"][1]["store_workers"] == 2
    assert {"store-1", "store-2"} <= set(result["queries"][1]["cpu_s"])
    server = result["store_growth"]["server"]
    assert server["cards"] == CARDS and server["disk_bytes_per_card_per_copy"] > 0
    assert "ram_bytes_per_card_per_copy" in server
    assert result["store_growth"]["embedded"]["disk_bytes_per_card"] > 0
    assert [(c["round"], c["workers"]) for c in result["check"]] == [(1, 1)]
    for c, run in zip(result["check"], result["ingest"]):
        assert c["measured_turns_per_s"] == run["stored_turns_per_s"] and c["predicted_turns_per_s"] > 0
        assert c["bound"] in {"ingest_cpu", "store_lane", "machine_cpu"}
    assert result["check_summary"]["ratios"]["1"]["runs"] == 1
    # what `memstream capacity` reads
    costs = measured_costs(result)
    assert plan(costs, Load(turns_per_s=10_000, cards=10**9, retention_days=7)).ingest_workers > 1
