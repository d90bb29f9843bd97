"""The capacity model (processors/operations/capacity.py): a hand-computed plan, monotonic in the load, counts
rounded up, partitions at least the workers, and the costs read from a bench result."""

import json
from dataclasses import replace

import pytest

from memstream.processors.operations.capacity import (
    GIB,
    Assumptions,
    Load,
    MeasuredCosts,
    gpu_turns_per_s,
    measured_costs,
    plan,
    predicted_turns_per_s,
    turn_bounds,
)
from memstream.streams.runtime import REPO_ROOT

COSTS = MeasuredCosts(
    ingest_cpu_ms_per_turn=50.0,
    store_cpu_ms_per_turn=10.0,
    broker_cpu_ms_per_turn=2.0,
    qdrant_cpu_ms_per_turn=1.0,
    query_cpu_ms=20.0,
    broker_cpu_ms_per_query=1.0,
    qdrant_cpu_ms_per_query=5.0,
    qdrant_ram_bytes_per_card=1000.0,
    qdrant_disk_bytes_per_card=2000.0,
    kafka_bytes_per_turn=5000.0,
)
HALF = Assumptions(cpu_utilisation=0.5)


def test_a_hand_computed_plan():
    p = plan(COSTS, Load(turns_per_s=100, cards=1_000_000, retention_days=1, queries_per_s=10), HALF)
    assert p.ingest_workers == 10  # 100 x 50 ms = 5 cores, at 50 %: 10
    assert p.store_workers == 3  # (100 x 10 + 10 x 20) ms = 1.2 cores, at 50 %: 2.4 -> 3
    assert p.partitions == 20  # 2 x the larger group
    assert p.broker_cores == pytest.approx(0.42)  # (200 + 10) ms / 0.5
    assert p.kafka_disk_bytes == 100 * 86_400 * 5000 * 3
    assert p.brokers == 3 and p.limits["brokers"] == "replication"
    assert p.qdrant_cores == pytest.approx(0.3)
    assert p.qdrant_ram_bytes == 1_000_000 * 1000 * 2 and p.qdrant_disk_bytes == 1_000_000 * 2000 * 2
    assert p.qdrant_nodes == 2 and p.qdrant_shards == 4
    assert p.total_cores == pytest.approx(13 + 0.42 + 0.3)
    assert p.embed_gpus is None


def test_ten_thousand_turns_a_second_and_a_billion_cards():
    p = plan(COSTS, Load(turns_per_s=10_000, cards=10**9, retention_days=7))
    assert p.ingest_workers == 715  # 10,000 x 50 ms = 500 cores / 0.7 = 714.3
    ram = 10**9 * 1000 * 2
    assert p.qdrant_nodes == -(-ram // int(64 * GIB * 0.7)) and p.limits["qdrant_nodes"] == "ram"
    assert p.qdrant_ram_per_node_bytes <= 64 * GIB * 0.7
    disk = 10_000 * 7 * 86_400 * 5000 * 3
    assert p.kafka_disk_bytes == disk and p.brokers == max(3, -(-disk // int(4 * 1024**4 * 0.7)))


def test_counts_round_up_and_never_fall_below_one_or_the_replication():
    p = plan(COSTS, Load(turns_per_s=0.001, cards=1, retention_days=0))
    assert (p.ingest_workers, p.store_workers, p.brokers, p.qdrant_nodes) == (1, 1, 3, 2)
    exact = plan(COSTS, Load(turns_per_s=14, cards=0, retention_days=0), Assumptions(cpu_utilisation=1.0))
    assert exact.ingest_workers == 1 and exact.partitions == 2  # 14 x 50 ms = 0.7 core -> 1 worker
    just_over = plan(COSTS, Load(turns_per_s=20.2, cards=0, retention_days=0), Assumptions(cpu_utilisation=1.0))
    assert just_over.ingest_workers == 2
    assert (
        plan(COSTS, Load(turns_per_s=20, cards=0, retention_days=0), Assumptions(cpu_utilisation=1.0)).ingest_workers
        == 1
    )


@pytest.mark.parametrize("field", ["turns_per_s", "cards", "retention_days", "queries_per_s"])
def test_the_plan_never_shrinks_as_the_load_grows(field):
    load = Load(turns_per_s=500, cards=10**7, retention_days=3, queries_per_s=50)
    previous = plan(COSTS, load)
    for factor in (2, 5, 10, 100, 1000):
        grown = plan(COSTS, replace(load, **{field: getattr(load, field) * factor}))
        for name in (
            "ingest_workers",
            "store_workers",
            "partitions",
            "brokers",
            "kafka_disk_bytes",
            "qdrant_nodes",
            "qdrant_shards",
            "qdrant_ram_bytes",
            "total_cores",
        ):
            assert getattr(grown, name) >= getattr(previous, name), (field, factor, name)
        assert grown.partitions >= max(grown.ingest_workers, grown.store_workers)
        previous = grown


def test_partitions_are_at_least_the_workers_whatever_the_headroom():
    p = plan(COSTS, Load(turns_per_s=1000, cards=0, retention_days=0), Assumptions(partition_headroom=0.1))
    assert p.partitions >= max(p.ingest_workers, p.store_workers)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        Load(turns_per_s=-1, cards=0, retention_days=0)
    with pytest.raises(ValueError):
        Assumptions(cpu_utilisation=0)
    with pytest.raises(ValueError):
        replace(COSTS, kafka_bytes_per_turn=-1.0)


def test_the_model_predicts_the_throughput_of_a_shared_machine():
    # 1 worker: bound by its one core (1000 / 50 = 20 turns/s); 4 workers on 2 cores: by the machine,
    # 2000 ms / (50 + 10 + 2 + 1 + 2 ms of the client) turns
    assert predicted_turns_per_s(COSTS, 1, 2.0) == pytest.approx(20.0)
    assert predicted_turns_per_s(COSTS, 4, 2.0, client_ms=2.0) == pytest.approx(2000 / 65)
    # a store worker whose index stage is busy 40 ms a turn stores at most 25 turns/s, two at 50
    lane = replace(COSTS, store_lane_ms_per_turn=40.0)
    assert predicted_turns_per_s(lane, 4, 8.0) == pytest.approx(25.0)
    assert turn_bounds(lane, 4, 8.0, store_workers=2) == pytest.approx(
        {"ingest_cpu": 80.0, "store_lane": 50.0, "machine_cpu": 8000 / 63}
    )
    assert predicted_turns_per_s(lane, 1, 2.0) == pytest.approx(20.0)  # the ingest worker's core binds first


def test_store_workers_cover_the_index_lane_when_it_binds_before_their_cpu():
    load = Load(turns_per_s=100, cards=0, retention_days=0)
    assert plan(COSTS, load, HALF).limits["store_workers"] == "cpu"
    # 100 turns/s x 40 ms = 4 lanes busy, at 50 %: 8 store workers (their CPU needs 2)
    p = plan(replace(COSTS, store_lane_ms_per_turn=40.0), load, HALF)
    assert p.store_workers == 8 and p.limits["store_workers"] == "index lane"


def bench_result() -> dict:
    run = {
        "workers": 1,
        "cards": 300,
        "kafka_bytes_per_turn": 9000.0,
        "cpu_ms_per_turn": {"ingest": 50.0, "store": 10.0, "brokers": 2.0, "qdrant": 1.0, "client": 1.0},
    }
    query = {"setup": "server-1", "cpu_ms_per_query": {"store": 20.0, "brokers": 1.0, "qdrant": 5.0}}
    return {
        "mode": "cluster",
        "turns": 100,
        "kafka": {"replication_factor": 3},
        "ingest": [{**run, "workers": 2}, run],
        "queries": [{**query, "setup": "embedded-1"}, query],
        "store_growth": {"server": {"ram_bytes_per_card_per_copy": 1000.0, "disk_bytes_per_card_per_copy": 2000.0}},
    }


def test_costs_come_from_the_one_worker_runs_and_per_copy():
    embed = json.loads((REPO_ROOT / "docs/results/capacity/embed-h200-cuda.json").read_text())
    costs = measured_costs(bench_result(), embed=embed, source="x")
    assert costs == replace(
        COSTS,
        kafka_bytes_per_turn=3000.0,
        cards_per_turn=3.0,
        embed_gpu_turns_per_s=costs.embed_gpu_turns_per_s,
        source="x",
    )
    assert 1000 < costs.embed_gpu_turns_per_s < 1200  # docs/capacity.md: about 1,100 turns/s per H200
    assert gpu_turns_per_s({"precisions": {}}) is None


def test_fixed_costs_add_broker_cores_per_worker_and_qdrant_cores_per_node():
    fixed = replace(COSTS, broker_idle_cores_per_worker=0.05, qdrant_idle_cores_per_node=0.1)
    load = Load(turns_per_s=100, cards=1_000_000, retention_days=1, queries_per_s=10)
    p, q = plan(COSTS, load, HALF), plan(fixed, load, HALF)
    assert q.broker_cores == pytest.approx(p.broker_cores + 13 * 0.05 / 0.5)
    assert q.qdrant_cores == pytest.approx(p.qdrant_cores + 2 * 0.1 / 0.5)


def test_net_costs_and_idle_come_from_the_result():
    result = bench_result()
    run = result["ingest"][1]
    run["cpu_ms_per_turn"] |= {"ingest-1": 50.0, "store-1": 10.0, "qdrant-1": 1.0, "qdrant-2": 0.0}
    run["cpu_ms_per_turn_net"] = {**run["cpu_ms_per_turn"], "brokers": 1.0}
    run["idle_cpu_cores"] = {"brokers": 0.2, "qdrant": 0.1}
    run["store_lane_ms_per_turn"] = 30.0
    costs = measured_costs(result)
    assert costs.store_lane_ms_per_turn == 30.0
    assert costs.broker_cpu_ms_per_turn == 1.0
    assert costs.broker_idle_cores_per_worker == pytest.approx(0.1)  # two worker processes
    assert costs.qdrant_idle_cores_per_node == pytest.approx(0.05)  # two nodes


# --- LLM mode ------------------------------------------------------------------------------------


def llm_measured() -> dict:
    """A ``bench llm-throughput`` result's shape, with round figures."""
    run = {"per_1000_turns": {"calls": 25.0, "prompt_tokens": 40_000.0, "completion_tokens": 10_000.0}}
    question = {"per_question": {"calls": 1.0, "prompt_tokens": 900.0, "completion_tokens": 60.0}}
    return {"ingest": [run, run], "questions": [question, question]}


def test_llm_costs_read_calls_and_tokens_per_unit():
    from memstream.processors.operations.capacity import llm_costs

    costs = llm_costs(llm_measured(), source="x.json")
    assert costs.extract_calls_per_1000_turns == 25.0
    assert costs.extract_prompt_tokens_per_1000_turns == 40_000.0
    assert costs.answer_calls_per_question == 1.0 and costs.answer_completion_tokens_per_question == 60.0


def test_llm_plan_sizes_workers_by_littles_law_and_counts_calls_tokens_and_cost():
    from memstream.processors.operations.capacity import LlmProvider, llm_costs, llm_plan

    costs = llm_costs(llm_measured())
    provider = LlmProvider(latency_s=2.0, in_flight=64, utilisation=0.5, price_prompt_per_m=1.0)
    plan = llm_plan(costs, provider, turns_per_s=10_000, questions_per_s=1_000)
    # 250 extraction calls/s x 2 s = 500 in flight, 32 usable slots a worker: 16 workers
    assert plan.extract_workers == 16
    # 1,000 answer calls/s x 2 s = 2,000 in flight / 32: 63 workers (62.5 rounded up)
    assert plan.query_workers == 63
    assert plan.calls_per_s == 1250 and plan.calls_in_flight == 2500
    assert plan.prompt_tokens_per_s == 10_000 * 40 + 1_000 * 900
    assert plan.cost_per_hour == round(3600 * plan.prompt_tokens_per_s / 1e6, 2)
    assert plan.within_limits and plan.max_turns_per_s is None  # no limits given


def test_llm_plan_says_when_a_load_is_over_the_providers_limits_and_what_fits():
    from memstream.processors.operations.capacity import LlmProvider, llm_costs, llm_plan

    costs = llm_costs(llm_measured())
    provider = LlmProvider(latency_s=1.0, rpm=60_000, utilisation=1.0)  # 1,000 calls/s
    over = llm_plan(costs, provider, turns_per_s=40_000, questions_per_s=100)  # 1,000 + 100 calls/s
    assert not over.within_limits and over.limit_share["rpm"] == 1.1
    # 1,000 calls/s less the questions' 100, at 0.025 calls a turn
    assert over.max_turns_per_s == 36_000
    assert llm_plan(costs, provider, turns_per_s=36_000, questions_per_s=100).within_limits


def test_a_provider_needs_a_latency_and_a_slot():
    import pytest

    from memstream.processors.operations.capacity import LlmProvider

    with pytest.raises(ValueError):
        LlmProvider(latency_s=0)
    with pytest.raises(ValueError):
        LlmProvider(latency_s=1, in_flight=0)
