"""`bench scale` option parsing (--cluster and the rest) and `memstream capacity` on a results file:
no service runs."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from memstream.bench import cli as bench_cli
from memstream.bench import clusters
from memstream.bench.cli import bench, parse_counts
from memstream.bench.scale import ClusterScaleOptions, check_summary, kafka_cluster, model_check
from memstream.bench.scoring import spread
from memstream.processors.operations.capacity import measured_costs
from memstream.streams import runtime
from memstream.streams.cli import cli
from tests.processors.operations.test_capacity import bench_result

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
    assert (options.cards, options.questions, options.askers, options.rounds) == (100_000, 200, 4, 3)
    assert spread(list(range(10)), 3) == [0, 3, 6] and spread([1, 2], 5) == [1, 2]
    base = clusters.free_base_port(31333, [0, 1])
    assert base >= 31333 and (base - 31333) % 100 == 0
    import socket

    with socket.socket() as taken:  # a base whose second port is in use is passed over
        taken.bind(("127.0.0.1", base + 1))
        assert clusters.free_base_port(base, [0, 1]) >= base + 100


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


def test_the_check_compares_the_rate_to_stored_with_the_binding_bound_and_sums_up_the_rounds():
    result = bench_result()  # costs: ingest 50, store 10, brokers 2, Qdrant 1 CPU-ms per turn
    one = result["ingest"][1]
    one |= {
        "round": 1,
        "stored_s": 10.0,
        "idle_cpu_cores": {"brokers": 0.1},
        "cpu_ms_per_turn_net": {**one["cpu_ms_per_turn"], "client": 2.0},
    }
    one["store_lane_ms_per_turn"] = 40.0
    costs = measured_costs(result)
    # round 1, 1 worker: 100 turns stored in 10 s = 10 turns/s; its core allows 20, the store lane 25
    # and 1.9 free cores 1900 / 65 = 29.2: the worker binds
    # round 2, 4 workers: 100 turns in 5 s = 20/s against the store lane's 25
    four = {**one, "round": 2, "workers": 4, "stored_s": 5.0, "stored_turns_per_s": 20.0}
    result["ingest"] = [one, four]
    rows = model_check(result, costs, cores=2.0)
    assert [(r["round"], r["workers"], r["bound"]) for r in rows] == [(1, 1, "ingest_cpu"), (2, 4, "store_lane")]
    assert [(r["measured_turns_per_s"], r["predicted_turns_per_s"], r["ratio"]) for r in rows] == [
        (10.0, 20.0, 0.5),
        (20.0, 25.0, 0.8),
    ]
    summary = check_summary(rows + [{**rows[1], "ratio": 1.1}])
    assert summary["within"] is False  # 0.5 and 0.8 are over 15 % off
    assert summary["ratios"]["4"] == {"median": 0.95, "min": 0.8, "max": 1.1, "runs": 2}
    assert check_summary([{**rows[0], "ratio": 0.9}, {**rows[1], "ratio": 1.12}])["within"] is True


def test_the_bench_starts_its_kafka_cluster_again_on_the_base_port_its_data_was_made_with(tmp_path: Path):
    options = ClusterScaleOptions(data=Path("x"), workdir=tmp_path)
    fresh = kafka_cluster(options)
    assert fresh.base_port >= 21092 and fresh.data == tmp_path / "kafka"
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "cluster.layout").write_text("brokers=3\nbase_port=21102\n")  # kafka.sh writes it
    assert kafka_cluster(options).base_port == 21102  # kafka.sh refuses any other port for this folder
    options.kafka_port = 23000
    assert kafka_cluster(options).base_port == 23000


def test_the_committed_cluster_results_hold_what_docs_capacity_says():
    """docs/capacity.md quotes these: the bench client is a small share (its CPU no longer includes the
    workers it started), the check is the rate to stored against the model from round 1's costs over
    three rounds, and the committed plan is the one those costs give."""
    from memstream.processors.operations.capacity import Load, plan

    folder = runtime.REPO_ROOT / "docs" / "results" / "capacity"
    result = json.loads((folder / "scale-cluster.json").read_text())
    for run in result["ingest"]:
        workers = sum(v for k, v in run["cpu_s"].items() if k.startswith(("ingest-", "store-")))
        assert run["cpu_s"]["client"] < 0.1 * workers
    assert sorted({(r["round"], r["workers"]) for r in result["ingest"]}) == [
        (r, n) for r in (1, 2, 3) for n in (1, 2, 4)
    ]
    costs = measured_costs(result)
    assert model_check(result, costs, float(result["cores"])) == result["check"]
    ratios = [row["ratio"] for row in result["check"]]
    assert 0.83 <= min(ratios) and max(ratios) <= 1.01  # the spread the docs report and the plan carries
    assert check_summary(result["check"]) == result["check_summary"]
    committed = json.loads((folder / "plan-10k-1b.json").read_text())
    load = Load(turns_per_s=10_000, cards=10**9, retention_days=7, queries_per_s=1000)
    embed = json.loads((folder / "embed-h200-cuda.json").read_text())  # `memstream capacity` reads it by default
    assert plan(measured_costs(result, embed=embed), load).as_dict() == committed["plan"]
    assert committed["plan"]["limits"]["store_workers"] == "index lane"
