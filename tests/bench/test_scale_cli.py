"""`bench scale` option parsing (--cluster and the rest) and `memstream capacity` on a results file:
no service runs."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from memstream.bench import cli as bench_cli
from memstream.bench.cli import bench, parse_counts
from memstream.bench.scale import ClusterScaleOptions, spread
from memstream.streams import runtime
from memstream.streams.cli import cli
from tests.processors.test_capacity import bench_result

runner = CliRunner()


def test_counts_parse_in_order_once_and_refuse_nonsense():
    assert parse_counts("1,2,4") == [1, 2, 4]
    assert parse_counts(" 2, 1 ,2,") == [2, 1]
    for bad in ("", "0,1", "a", "1,-2"):
        with pytest.raises(typer.BadParameter):
            parse_counts(bad)


def test_cluster_options_reach_the_cluster_bench(monkeypatch):
    seen = {}
    monkeypatch.setattr(bench_cli, "_scale_cluster", lambda **kw: seen.update(kw))
    args = ["scale", "--cluster", "--workers", "1,2", "--max-turns", "60", "--cards", "2000", "--questions", "20"]
    done = runner.invoke(
        bench, [*args, "--askers", "3", "--workdir", "/tmp/x", "--no-embedded", "--kafka-port", "21100"]
    )
    assert done.exit_code == 0, done.output
    assert seen["workers"] == [1, 2] and seen["store_workers"] == [1, 2] and seen["turns"] == 60
    assert (seen["cards"], seen["questions"], seen["askers"], seen["embedded"]) == (2000, 20, 3, False)
    assert seen["workdir"] == Path("/tmp/x") and seen["kafka_port"] == 21100 and seen["qdrant_url"] is None
    done = runner.invoke(bench, ["scale", "--cluster"])
    assert seen["workers"] == [1, 2, 4] and seen["cards"] == 100_000 and seen["askers"] == 4  # the defaults
    assert runner.invoke(bench, ["scale", "--cluster", "--workers", "0"]).exit_code != 0


def test_without_cluster_the_old_bench_runs(monkeypatch):
    seen = {}

    def fake(options, **_):
        seen["options"] = options
        return {"stages": ["compress"], "turns": 60, "conversations": 3, "partitions": 4, "runs": [], "machine": "m"}

    monkeypatch.setattr("memstream.bench.scale.run_scale_bench", fake)
    done = runner.invoke(bench, ["scale", "--turns", "60"])
    assert done.exit_code == 0, done.output
    assert type(seen["options"]).__name__ == "ScaleOptions" and tuple(seen["options"].workers) == (1, 2)


def test_cluster_defaults_and_helpers():
    options = ClusterScaleOptions(data=Path("x"))
    assert tuple(options.workers) == (1, 2, 4) and tuple(options.store_workers) == (1, 2)
    assert (options.cards, options.questions, options.askers) == (100_000, 200, 4)
    assert spread(list(range(10)), 3) == [0, 3, 6] and spread([1, 2], 5) == [1, 2]
    base = runtime.free_base_port(31333, [0, 1])
    assert base >= 31333 and (base - 31333) % 100 == 0
    import socket

    with socket.socket() as taken:  # a base whose second port is in use is passed over
        taken.bind(("127.0.0.1", base + 1))
        assert runtime.free_base_port(base, [0, 1]) >= base + 100


def test_capacity_reads_a_result_and_prints_a_plan(tmp_path: Path):
    results = tmp_path / "scale-cluster.json"
    results.write_text(json.dumps(bench_result()))
    out = tmp_path / "plan.json"
    args = ["capacity", "--turns-per-s", "10000", "--cards", "1000000000", "--retention-days", "7"]
    done = runner.invoke(cli, [*args, "--results", str(results), "--json", str(out)])
    assert done.exit_code == 0, done.output
    assert "Qdrant nodes" in done.output and "assumptions" in done.output
    plan = json.loads(out.read_text())
    assert plan["plan"]["ingest_workers"] == 715 and plan["assumptions"]["cpu_utilisation"] == 0.7
    assert plan["costs"]["kafka_bytes_per_turn"] == 3000.0
    missing = runner.invoke(cli, [*args, "--results", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "bench scale --cluster" in missing.output
