"""What a deployment needs for a load, from costs measured on one machine (``bench scale --cluster``).

Pure functions: :func:`measured_costs` reads the bench's JSON into a :class:`MeasuredCosts` record,
:func:`plan` turns it and a :class:`Load` into a :class:`CapacityPlan` (workers, partitions, cores,
Qdrant nodes, shards and RAM, Kafka disk and brokers) under stated :class:`Assumptions`, and
:func:`predicted_turns_per_s` is the model's throughput for a machine, to check it against the runs
it was measured on. docs/capacity.md explains the model and what one machine cannot tell.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

GIB = 1024**3
TIB = 1024**4


@dataclass(frozen=True)
class MeasuredCosts:
    """Costs per unit of work, each process role's CPU in milliseconds (CPU time, not wall time)."""

    ingest_cpu_ms_per_turn: float  # the ingest group (compress, segment, stm, extract), all its workers
    store_cpu_ms_per_turn: float  # the store group (index, consolidate, query) while it indexes
    broker_cpu_ms_per_turn: float  # all brokers together, at the measured replication factor
    qdrant_cpu_ms_per_turn: float  # all Qdrant nodes together
    query_cpu_ms: float  # the store worker, per question (evidence only, no LLM)
    broker_cpu_ms_per_query: float
    qdrant_cpu_ms_per_query: float
    qdrant_ram_bytes_per_card: float  # one copy: measured total / the collections' replication factor
    qdrant_disk_bytes_per_card: float  # one copy
    kafka_bytes_per_turn: float  # one copy, every topic (front, cards, changelogs): measured / replication
    cards_per_turn: float = 0.0  # real cards the measured turns made (for information)
    # Fixed CPU, whatever the load (measured with the workers ready and idle): the brokers' for each
    # worker process (its consumers' fetches, heartbeats), and each Qdrant node's (consensus, telemetry).
    broker_idle_cores_per_worker: float = 0.0
    qdrant_idle_cores_per_node: float = 0.0
    embed_gpu_turns_per_s: float | None = None  # one GPU embedding for this many turns/s (docs/capacity.md)
    # Wall time a store worker's busiest stage (index) spends per turn: it takes one message at a time
    # and waits for each replicated upsert, so a store worker indexes at most 1000 / this turns/s
    # whatever its CPU. Measured on the bench's shared cores, it includes waiting for a core.
    store_lane_ms_per_turn: float = 0.0
    source: str = ""  # where the figures come from

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{name} must not be negative, not {value}")


@dataclass(frozen=True)
class Load:
    turns_per_s: float
    cards: int  # cards kept in Qdrant
    retention_days: float  # Kafka topic retention
    queries_per_s: float = 0.0

    def __post_init__(self) -> None:
        if self.turns_per_s < 0 or self.cards < 0 or self.retention_days < 0 or self.queries_per_s < 0:
            raise ValueError("a load is never negative")


@dataclass(frozen=True)
class Assumptions:
    cpu_utilisation: float = 0.7  # target busy share of every core (headroom for bursts and rebalances)
    worker_cores: float = 1.0  # a worker process runs on one core (its models' threads: MEMSTREAM_TORCH_THREADS=1)
    partition_headroom: float = 2.0  # partitions per worker of the larger group: room to double the workers
    kafka_replication: int = 3
    broker_cores: int = 8
    broker_disk_tib: float = 4.0
    disk_utilisation: float = 0.7  # of a broker's or node's disk
    qdrant_replication: int = 2
    qdrant_node_ram_gib: float = 64.0
    qdrant_node_cores: int = 8
    qdrant_node_disk_tib: float = 2.0
    ram_utilisation: float = 0.7  # of a Qdrant node's RAM (the rest: page cache, optimiser, spikes)
    shards_per_node: int = 2  # so whole shards can move when nodes are added

    def __post_init__(self) -> None:
        for name in ("cpu_utilisation", "disk_utilisation", "ram_utilisation"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1]")
        if self.kafka_replication < 1 or self.qdrant_replication < 1 or self.shards_per_node < 1:
            raise ValueError("replication factors and shards per node are at least 1")


@dataclass(frozen=True)
class CapacityPlan:
    ingest_workers: int
    store_workers: int
    partitions: int
    worker_cores: float
    brokers: int
    broker_cores: float  # CPU the brokers need (cores, at the target utilisation)
    kafka_disk_bytes: float  # all copies for the retention
    qdrant_nodes: int
    qdrant_shards: int
    qdrant_cores: float
    qdrant_ram_bytes: float  # all copies
    qdrant_ram_per_node_bytes: float
    qdrant_disk_bytes: float  # all copies
    total_cores: float
    embed_gpus: int | None  # GPUs if the embedder runs on them (the workers' CPU then drops, docs/capacity.md)
    limits: dict[str, str] = field(default_factory=dict)  # what decided each count

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ceil(x: float) -> int:
    """Round up, forgiving float noise just above a whole number (3.0000000001 -> 3)."""
    return max(0, math.ceil(round(x, 9)))


def plan(costs: MeasuredCosts, load: Load, assume: Assumptions = Assumptions()) -> CapacityPlan:
    """Workers, partitions, cores, brokers, Kafka disk and Qdrant nodes, shards and RAM for ``load``.

    Every CPU cost scales linearly with the load (turns and questions are independent: nothing in a
    turn's path grows with the number of conversations), so the cores a role needs are
    ``rate x CPU-seconds per unit / utilisation``; workers are single-core processes. Kafka's costs
    were measured at some replication factor and are scaled to ``assume.kafka_replication``."""
    u = assume.cpu_utilisation
    ingest_cores = load.turns_per_s * costs.ingest_cpu_ms_per_turn / 1000 / u
    store_cores = (load.turns_per_s * costs.store_cpu_ms_per_turn + load.queries_per_s * costs.query_cpu_ms) / 1000 / u
    ingest_workers = max(1, _ceil(ingest_cores / assume.worker_cores))
    store_by_cpu = max(1, _ceil(store_cores / assume.worker_cores))
    # each store worker's index stage is busy store_lane_ms per turn, one message at a time
    store_by_lane = _ceil(load.turns_per_s * costs.store_lane_ms_per_turn / 1000 / u)
    store_workers = max(store_by_cpu, store_by_lane)
    partitions = max(
        ingest_workers, store_workers, _ceil(max(ingest_workers, store_workers) * assume.partition_headroom)
    )

    fixed_broker = (ingest_workers + store_workers) * costs.broker_idle_cores_per_worker
    broker_cores = fixed_broker / u + (
        (load.turns_per_s * costs.broker_cpu_ms_per_turn + load.queries_per_s * costs.broker_cpu_ms_per_query)
        / 1000
        / u
    )
    kafka_disk = load.turns_per_s * load.retention_days * 86400 * costs.kafka_bytes_per_turn * assume.kafka_replication
    by_disk = _ceil(kafka_disk / (assume.broker_disk_tib * TIB * assume.disk_utilisation))
    by_cpu = _ceil(broker_cores / assume.broker_cores)
    brokers = max(assume.kafka_replication, by_disk, by_cpu)

    qdrant_cores = (
        (load.turns_per_s * costs.qdrant_cpu_ms_per_turn + load.queries_per_s * costs.qdrant_cpu_ms_per_query)
        / 1000
        / u
    )
    ram = load.cards * costs.qdrant_ram_bytes_per_card * assume.qdrant_replication
    disk = load.cards * costs.qdrant_disk_bytes_per_card * assume.qdrant_replication
    by_ram = _ceil(ram / (assume.qdrant_node_ram_gib * GIB * assume.ram_utilisation))
    by_qdisk = _ceil(disk / (assume.qdrant_node_disk_tib * TIB * assume.disk_utilisation))
    # each node also spends its fixed share: a node has node_cores - idle / u cores for the load
    per_node = assume.qdrant_node_cores - costs.qdrant_idle_cores_per_node / u
    by_qcpu = _ceil(qdrant_cores / per_node) if per_node > 0 else 10**9
    nodes = max(assume.qdrant_replication, by_ram, by_qdisk, by_qcpu)
    qdrant_cores += nodes * costs.qdrant_idle_cores_per_node / u

    worker_cores = (ingest_workers + store_workers) * assume.worker_cores
    gpus = _ceil(load.turns_per_s / costs.embed_gpu_turns_per_s) if costs.embed_gpu_turns_per_s else None
    limits = {
        "brokers": max(
            (("replication", assume.kafka_replication), ("disk", by_disk), ("cpu", by_cpu)), key=lambda kv: kv[1]
        )[0],
        "qdrant_nodes": max(
            (("replication", assume.qdrant_replication), ("ram", by_ram), ("disk", by_qdisk), ("cpu", by_qcpu)),
            key=lambda kv: kv[1],
        )[0],
        "partitions": f"{assume.partition_headroom:g} x the larger group's workers",
        "store_workers": "index lane" if store_by_lane > store_by_cpu else "cpu",
    }
    return CapacityPlan(
        ingest_workers=ingest_workers,
        store_workers=store_workers,
        partitions=partitions,
        worker_cores=worker_cores,
        brokers=brokers,
        broker_cores=round(broker_cores, 2),
        kafka_disk_bytes=kafka_disk,
        qdrant_nodes=nodes,
        qdrant_shards=nodes * assume.shards_per_node,
        qdrant_cores=round(qdrant_cores, 2),
        qdrant_ram_bytes=ram,
        qdrant_ram_per_node_bytes=ram / nodes if nodes else 0.0,
        qdrant_disk_bytes=disk,
        total_cores=round(worker_cores + broker_cores + qdrant_cores, 2),
        embed_gpus=gpus,
        limits=limits,
    )


def turn_cpu_ms(costs: MeasuredCosts) -> float:
    """CPU a turn costs every process together (workers, brokers, Qdrant)."""
    return (
        costs.ingest_cpu_ms_per_turn
        + costs.store_cpu_ms_per_turn
        + costs.broker_cpu_ms_per_turn
        + costs.qdrant_cpu_ms_per_turn
    )


def turn_bounds(
    costs: MeasuredCosts, ingest_workers: int, cores: float, client_ms: float = 0.0, store_workers: int = 1
) -> dict[str, float]:
    """Turns/s to stored that each resource allows with ``ingest_workers`` single-core ingest workers and
    ``store_workers`` store workers on a machine of ``cores`` shared by every process (brokers, Qdrant,
    the producing client's ``client_ms`` per turn; give ``cores`` less what the processes spend idle):
    the ingest workers' CPU, the store workers' one-message-at-a-time index stage, the machine's CPU."""

    def rate(units: float, ms_per_turn: float) -> float:
        return units * 1000 / ms_per_turn if ms_per_turn else math.inf

    return {
        "ingest_cpu": rate(ingest_workers, costs.ingest_cpu_ms_per_turn),
        "store_lane": rate(store_workers, costs.store_lane_ms_per_turn),
        "machine_cpu": rate(cores, turn_cpu_ms(costs) + client_ms),
    }


def predicted_turns_per_s(
    costs: MeasuredCosts, ingest_workers: int, cores: float, client_ms: float = 0.0, store_workers: int = 1
) -> float:
    """The model's throughput to stored: the lowest of :func:`turn_bounds`."""
    return min(turn_bounds(costs, ingest_workers, cores, client_ms, store_workers).values())


def _first(runs: Sequence[Mapping[str, Any]], key: str, value: Any) -> Mapping[str, Any]:
    for run in runs:
        if run.get(key) == value:
            return run
    return runs[0]


def measured_costs(
    result: Mapping[str, Any], *, embed: Mapping[str, Any] | None = None, source: str = ""
) -> MeasuredCosts:
    """The costs in a ``bench scale --cluster`` result: turn costs from its 1-ingest-worker run (the
    least contended; net of idle CPU, which gives the fixed costs), query costs from its
    1-store-worker run on the server, bytes per card from the server store's growth. ``embed``: an
    ``embed-*-cuda.json`` result (GPU texts/s at batch 64)."""
    ingest_runs = result["ingest"]
    run = _first(ingest_runs, "workers", 1)
    # net of the processes' idle CPU when the run has it (the marginal cost of a turn); that idle CPU
    # becomes the fixed costs below
    per_turn = run.get("cpu_ms_per_turn_net") or run["cpu_ms_per_turn"]
    idle = run.get("idle_cpu_cores", {})
    worker_processes = sum(1 for role in run["cpu_ms_per_turn"] if role.startswith(("ingest-", "store-")))
    nodes = sum(1 for role in run["cpu_ms_per_turn"] if role.startswith("qdrant-"))
    queries = result["queries"]
    query = _first(queries, "setup", "server-1")["cpu_ms_per_query"]
    growth = result["store_growth"]["server"]
    kafka_rf = result["kafka"]["replication_factor"]
    gpu_turns = None
    if embed:
        gpu_turns = gpu_turns_per_s(embed)
    return MeasuredCosts(
        ingest_cpu_ms_per_turn=per_turn["ingest"],
        store_cpu_ms_per_turn=per_turn["store"],
        broker_cpu_ms_per_turn=per_turn["brokers"],
        qdrant_cpu_ms_per_turn=per_turn["qdrant"],
        query_cpu_ms=query["store"],
        broker_cpu_ms_per_query=query["brokers"],
        qdrant_cpu_ms_per_query=query["qdrant"],
        qdrant_ram_bytes_per_card=growth["ram_bytes_per_card_per_copy"],
        qdrant_disk_bytes_per_card=growth["disk_bytes_per_card_per_copy"],
        kafka_bytes_per_turn=run["kafka_bytes_per_turn"] / kafka_rf,
        cards_per_turn=run["cards"] / max(result["turns"], 1),
        broker_idle_cores_per_worker=idle.get("brokers", 0.0) / max(worker_processes, 1),
        qdrant_idle_cores_per_node=idle.get("qdrant", 0.0) / max(nodes, 1),
        embed_gpu_turns_per_s=gpu_turns,
        store_lane_ms_per_turn=run.get("store_lane_ms_per_turn", 0.0),
        source=source,
    )


# A turn asks the embedder for its own vector in a 12-turn window (batch ~16) and ~4 new texts at
# the index stage (batch ~64): docs/capacity.md, "The embedder on a GPU".
TEXTS_PER_TURN_BATCHED = 4.0


def gpu_turns_per_s(embed: Mapping[str, Any], precision: str = "float32") -> float | None:
    """Turns/s one GPU embeds for, from ``memstream bench embed-device measure``'s result: per turn one
    text at the batch-16 rate and four at the batch-64 rate (1 / 2,557 + 4 / 7,912 s on the H200:
    1,100 turns/s)."""
    rates = {int(b): float(r) for b, r in embed.get("precisions", {}).get(precision, {}).get("texts_per_s", {}).items()}
    if not rates.get(16) or not rates.get(64):
        return None
    seconds = 1 / rates[16] + TEXTS_PER_TURN_BATCHED / rates[64]
    return round(1 / seconds, 1)


# --- LLM mode ----------------------------------------------------------------------------------------
# With an LLM, extraction and answers wait on calls: a worker keeps ``in_flight`` of them going at
# once (MEMSTREAM_LLM_IN_FLIGHT), so by Little's law a stage needs ``calls/s x mean latency`` calls
# in flight, and the workers that hold them. Calls and tokens per unit do not change with the
# concurrency (``bench llm-throughput`` measures them at every in-flight count); the provider's
# limits cap what one account can take, and its prices give the cost.


@dataclass(frozen=True)
class LlmCosts:
    """What LLM mode spends per unit of work, measured (``bench llm-throughput``)."""

    extract_calls_per_1000_turns: float
    extract_prompt_tokens_per_1000_turns: float
    extract_completion_tokens_per_1000_turns: float
    answer_calls_per_question: float
    answer_prompt_tokens_per_question: float
    answer_completion_tokens_per_question: float
    planner_calls_per_question: float = 0.0  # the LLM planner's, where it is called
    planner_tokens_per_question: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class LlmProvider:
    """The endpoint, as an operator knows it: its latency, limits and prices."""

    latency_s: float  # mean seconds a call takes (Little's law needs the mean, not the median)
    in_flight: int = 64  # calls in flight per worker and stage (MEMSTREAM_LLM_IN_FLIGHT)
    rpm: float = 0.0  # requests per minute the account may send (0 = no limit)
    tpm: float = 0.0  # tokens per minute (0 = no limit)
    price_prompt_per_m: float = 0.0  # per million prompt tokens
    price_completion_per_m: float = 0.0  # per million completion tokens
    utilisation: float = 0.8  # of the in-flight slots and of the limits (headroom for latency spikes, 429s)

    def __post_init__(self) -> None:
        if self.latency_s <= 0 or self.in_flight < 1:
            raise ValueError("a call takes some time, and a worker keeps at least one in flight")
        if not 0 < self.utilisation <= 1:
            raise ValueError("utilisation must be in (0, 1]")


@dataclass(frozen=True)
class LlmPlan:
    extract_workers: int  # LLM-bound: the ingest group needs at least this many (and its CPU plan's)
    query_workers: int  # LLM-bound: the store group's query stage, likewise
    calls_per_s: float
    prompt_tokens_per_s: float
    completion_tokens_per_s: float
    calls_in_flight: float  # all workers together (Little's law)
    requests_per_min: float
    tokens_per_min: float
    within_limits: bool
    limit_share: dict[str, float]  # of each provider limit the load takes (0 where unlimited)
    max_turns_per_s: float | None  # the ingest the limits allow with this many questions (None: no limit)
    cost_per_hour: float
    limits: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def llm_plan(costs: LlmCosts, provider: LlmProvider, turns_per_s: float, questions_per_s: float) -> LlmPlan:
    """Workers, calls, tokens, limit shares and cost of LLM extraction and LLM answers for a load."""
    extract_calls = turns_per_s * costs.extract_calls_per_1000_turns / 1000
    question_calls = questions_per_s * (costs.answer_calls_per_question + costs.planner_calls_per_question)
    calls = extract_calls + question_calls
    prompt = turns_per_s * costs.extract_prompt_tokens_per_1000_turns / 1000 + questions_per_s * (
        costs.answer_prompt_tokens_per_question + costs.planner_tokens_per_question
    )
    completion = (
        turns_per_s * costs.extract_completion_tokens_per_1000_turns / 1000
        + questions_per_s * costs.answer_completion_tokens_per_question
    )
    slots = provider.in_flight * provider.utilisation
    extract_workers = _ceil(extract_calls * provider.latency_s / slots) if extract_calls else 0
    query_workers = _ceil(question_calls * provider.latency_s / slots) if question_calls else 0
    rpm, tpm = calls * 60, (prompt + completion) * 60
    share = {
        "rpm": round(rpm / provider.rpm, 3) if provider.rpm else 0.0,
        "tpm": round(tpm / provider.tpm, 3) if provider.tpm else 0.0,
    }
    within = all(v <= provider.utilisation for v in share.values())
    max_turns = _turns_within_limits(costs, provider, questions_per_s)
    cost = 3600 * (prompt * provider.price_prompt_per_m + completion * provider.price_completion_per_m) / 1e6
    return LlmPlan(
        extract_workers=extract_workers,
        query_workers=query_workers,
        calls_per_s=round(calls, 2),
        prompt_tokens_per_s=round(prompt, 1),
        completion_tokens_per_s=round(completion, 1),
        calls_in_flight=round(calls * provider.latency_s, 1),
        requests_per_min=round(rpm, 1),
        tokens_per_min=round(tpm),
        within_limits=within,
        limit_share=share,
        max_turns_per_s=max_turns,
        cost_per_hour=round(cost, 2),
        limits={
            "workers": f"calls/s x {provider.latency_s:g} s mean latency / ({provider.in_flight} in flight x "
            f"{provider.utilisation:g})",
            "limits": f"the load within {provider.utilisation:g} of the provider's rpm and tpm",
        },
    )


def _turns_within_limits(costs: LlmCosts, provider: LlmProvider, questions_per_s: float) -> float | None:
    """The ingest (turns/s) the provider's limits leave room for beside ``questions_per_s``."""
    bounds = []
    per_turn_calls = costs.extract_calls_per_1000_turns / 1000
    per_turn_tokens = (
        costs.extract_prompt_tokens_per_1000_turns + costs.extract_completion_tokens_per_1000_turns
    ) / 1000
    q_calls = questions_per_s * (costs.answer_calls_per_question + costs.planner_calls_per_question)
    q_tokens = questions_per_s * (
        costs.answer_prompt_tokens_per_question
        + costs.answer_completion_tokens_per_question
        + costs.planner_tokens_per_question
    )
    if provider.rpm and per_turn_calls:
        bounds.append((provider.rpm * provider.utilisation / 60 - q_calls) / per_turn_calls)
    if provider.tpm and per_turn_tokens:
        bounds.append((provider.tpm * provider.utilisation / 60 - q_tokens) / per_turn_tokens)
    return round(max(0.0, min(bounds)), 1) if bounds else None


def llm_costs(result: Mapping[str, Any], source: str = "") -> LlmCosts:
    """The calls and tokens a ``bench llm-throughput`` result measured: per 1,000 turns from its
    ingest runs, per question from its question runs (averaged over the in-flight counts, which do
    not change them)."""

    def mean(runs: Sequence[Mapping[str, Any]], key: str, what: str) -> float:
        values = [r[what][key] for r in runs if r.get(what)]
        return sum(values) / len(values) if values else 0.0

    ingest, questions = result["ingest"], result["questions"]
    return LlmCosts(
        extract_calls_per_1000_turns=mean(ingest, "calls", "per_1000_turns"),
        extract_prompt_tokens_per_1000_turns=mean(ingest, "prompt_tokens", "per_1000_turns"),
        extract_completion_tokens_per_1000_turns=mean(ingest, "completion_tokens", "per_1000_turns"),
        answer_calls_per_question=mean(questions, "calls", "per_question"),
        answer_prompt_tokens_per_question=mean(questions, "prompt_tokens", "per_question"),
        answer_completion_tokens_per_question=mean(questions, "completion_tokens", "per_question"),
        source=source,
    )
