"""Knowledge updates before and after consolidation, and ingestion while consolidation runs.

LongMemEval's knowledge-update questions ask for a value the user later changed ("What is my
current highest score in Ticket to Ride?"). Each has two answer sessions: the older one holds the
stale value, the newest one the current value (their ``has_answer`` turns). Every question's
haystack goes through the real Kafka pipeline as its own conversation (extractive mode), the
question is asked over the request/reply topics, then the tenant is consolidated (a command on
``memory.control``) and the question is asked again. A question counts when the returned evidence
holds a turn of the newest value ranked above every turn of the stale one (or no stale turn).

While that consolidation runs, a probe conversation is ingested; before it, another one with nothing
else running. Two different haystacks (the worker caches embeddings, so a repeated text would be
free), compared in tokens per second: the two rates say whether consolidation slows ingestion.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from memstream.bench.deploy import deploy_worker, worker_samples
from memstream.bench.deployment import Deployment
from memstream.bench.longmemeval import (
    LongMemEvalQuestion,
    answer_sessions,
    load_longmemeval,
    longmemeval_conversation_id,
    longmemeval_date,
    longmemeval_turns,
)
from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.ports import StoreFilter, VectorStore
from memstream.processors.query.retrieve import RETIRED
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS
from memstream.schemas import Reply, Turn
from memstream.schemas.topics import INGEST_TOPICS

TENANT = "bench"


@dataclass(frozen=True)
class UpdateCase:
    """A knowledge-update question with the turns that hold the newest and the stale values."""

    question_id: str
    conversation_id: str
    question: str
    asked_at: datetime
    newest: frozenset[str]
    stale: frozenset[str]


@dataclass(frozen=True)
class UpdateOutcome:
    newest_rank: int | None  # first evidence item holding a newest-value turn (0 = top)
    stale_rank: int | None

    @property
    def newest_above_stale(self) -> bool:
        return self.newest_rank is not None and (self.stale_rank is None or self.newest_rank < self.stale_rank)


def update_case(q: LongMemEvalQuestion) -> UpdateCase | None:
    """The case of a knowledge-update question; None for abstention questions (nothing to find) and
    for questions whose answer sessions do not hold both a newest and a stale ``has_answer`` turn."""
    if q.question_type != "knowledge-update" or q.question_id.endswith("_abs"):
        return None
    sessions = sorted(answer_sessions(q))
    marked = [set(ids) for _, _, ids in sessions]
    if len(marked) < 2 or not marked[-1] or not any(marked[:-1]):
        return None
    asked_at = longmemeval_date(q.question_date) if q.question_date else sessions[-1][0]
    return UpdateCase(
        q.question_id,
        longmemeval_conversation_id(q),
        q.question,
        asked_at,
        frozenset(marked[-1]),
        frozenset(set().union(*marked[:-1])),
    )


def rank_values(case: UpdateCase, evidence_turns: Sequence[Iterable[str]]) -> UpdateOutcome:
    """Where the newest and the stale values first appear in the ranked evidence (pure)."""
    newest = stale = None
    for rank, turns in enumerate(evidence_turns):
        turns = set(turns)
        if newest is None and turns & case.newest:
            newest = rank
        if stale is None and turns & case.stale:
            stale = rank
    return UpdateOutcome(newest, stale)


def summarize_updates(outcomes: Sequence[UpdateOutcome]) -> dict[str, float]:
    n = max(len(outcomes), 1)
    return {
        "newest_above_stale": round(sum(o.newest_above_stale for o in outcomes) / n, 4),
        "newest_found": round(sum(o.newest_rank is not None for o in outcomes) / n, 4),
        "stale_found": round(sum(o.stale_rank is not None for o in outcomes) / n, 4),
        "questions": len(outcomes),
    }


@dataclass
class KnowledgeUpdateOptions:
    data: Path
    tau: float | None = None  # the consolidation threshold; None = the configured default
    k: int | None = None  # evidence items per question; None = the configured default
    probe_turns: int = 120
    workdir: Path = Path(".data/bench/knowledge-update")
    reopen: Path | None = None  # an earlier run's deployment folder: its haystacks are not ingested again


async def _ask_all(
    settings: Settings, cases: Sequence[UpdateCase], k: int | None, on_question: Callable[[], None]
) -> list[Reply]:
    replies = []
    async with AsyncMemoryClient(settings) as client:
        for case in cases:
            replies.append(
                await client.ask(
                    case.question,
                    tenant_id=TENANT,
                    conversation_id=case.conversation_id,
                    k=k,
                    answer=False,
                    question_time=case.asked_at,
                    timeout_s=120,
                )
            )
            on_question()
    return replies


def _outcomes(cases: Sequence[UpdateCase], replies: Sequence[Reply]) -> list[UpdateOutcome]:
    return [rank_values(c, [e.turn_ids for e in r.evidence]) for c, r in zip(cases, replies)]


def _metric_sums(port: str, names: Iterable[str]) -> dict[str, float]:
    """Sums of the worker's metrics (all label sets)."""
    wanted, out = set(names), dict[str, float]()
    for sample in worker_samples(port):
        if sample.name in wanted:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def _probe(turns: Sequence[Turn], tenant: str) -> list[Turn]:
    return [t.model_copy(update={"tenant_id": tenant, "conversation_id": "probe"}) for t in turns]


def _ingest_rate(deployment: Deployment, turns: Sequence[Turn]) -> dict[str, float]:
    """Seconds from producing ``turns`` to the ingest topics drained, turns and tokens per second."""
    t0 = time.monotonic()
    deployment.produce(turns)
    seconds = deployment.drain(timeout_s=1800, topics=INGEST_TOPICS) - t0
    tokens = sum(count_tokens(t.text) for t in turns)
    return {
        "turns": len(turns),
        "tokens": tokens,
        "seconds": round(seconds, 1),
        "turns_per_s": round(len(turns) / seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def value_similarity(store: VectorStore, case: UpdateCase) -> float | None:
    """The highest cosine between a card of the newest value and a card of the stale one (same
    subject): whether the stale card can enter the newest card's update queue at a given tau."""
    scope = StoreFilter(
        equals={"conversation_id": case.conversation_id}, any_of={"turn_ids": sorted(case.newest | case.stale)}
    )
    hits = store.scroll(CARDS, TENANT, where=scope, limit=10_000, with_vectors=True)
    newest = [h for h in hits if set(h.payload.get("turn_ids", [])) & case.newest]
    stale = [h for h in hits if set(h.payload.get("turn_ids", [])) & case.stale]
    pairs = [
        float(np.dot(a.vector, b.vector))
        for a in newest
        for b in stale
        if a.payload.get("subject") == b.payload.get("subject") and a.vector is not None and b.vector is not None
    ]
    return round(max(pairs), 4) if pairs else None


# What consolidation writes on a card; clearing them gives the card as it was indexed.
CONSOLIDATION_FIELDS = (
    "retired",
    "retired_ts",
    "valid_to",
    "superseded_by",
    "successor_order",
    "duplicate_of",
    "support",
)


def reset_consolidation(store: VectorStore, tenant_id: str) -> int:
    """Undo every consolidation decision on the tenant's cards (payload only; returns how many
    cards changed): a reopened deployment is measured before consolidation again."""
    changed = 0
    for hit in store.scroll(CARDS, tenant_id, limit=store.count(CARDS, tenant_id) + 1):
        fields = {k: None for k in CONSOLIDATION_FIELDS if hit.payload.get(k) not in (None, False, [])}
        if hit.payload.get("valid_to") is not None and not hit.payload.get("retired"):
            fields.pop("valid_to")  # validity the card was written with, not a decision
        if fields:
            changed += store.set_payload(CARDS, tenant_id, hit.id, fields)
    return changed


def inspect_store(deployment: Deployment, cases: Sequence[UpdateCase]) -> dict[str, Any]:
    """Versions in the store after consolidation, and how similar the newest and stale values are."""
    with deployment.store() as store:
        cards = store.count(CARDS, TENANT)
        retired = store.count(CARDS, TENANT, where=StoreFilter(equals=RETIRED))
        duplicates = sum(
            1
            for h in store.scroll(CARDS, TENANT, where=StoreFilter(equals=RETIRED), limit=cards + 1)
            if h.payload.get("duplicate_of")
        )
        similarity = [value_similarity(store, c) for c in cases]
    return {
        "versions": {"cards": cards, "retired": retired, "duplicates": duplicates, "superseded": retired - duplicates},
        "value_similarity": similarity,
    }


def run_knowledge_update_bench(
    options: KnowledgeUpdateOptions,
    *,
    status: Callable[[str], None] = lambda s: None,
    on_sent: Callable[[Any], None] | None = None,
    on_question: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    questions = load_longmemeval(options.data)
    cases = [c for c in map(update_case, questions) if c is not None]
    if not cases:
        raise ValueError(f"no knowledge-update questions with a newest and a stale value in {options.data}")
    by_id = {q.question_id: q for q in questions}
    turns = [t for c in cases for t in longmemeval_turns(by_id[c.question_id], tenant_id=TENANT)]
    others = [q for q in questions if q.question_type != "knowledge-update"] or questions
    if len(others) < 2:
        raise ValueError("the ingest probe needs two questions of another type than knowledge-update")
    probes = [longmemeval_turns(q, tenant_id="probe")[: options.probe_turns] for q in others[:2]]
    env: dict[str, str] = {
        "MEMSTREAM_EXTRACT_MODE": "extractive",
        "MEMSTREAM_LLM_BASE_URL": "",
        "MEMSTREAM_COMPRESSOR_MODEL": "",
        "MEMSTREAM_SLEEP_IDLE_S": "1000000000",
    }
    if options.tau is not None:
        env["MEMSTREAM_CONSOLIDATE_TAU"] = str(options.tau)
    result: dict[str, Any] = {
        "data": str(options.data),
        "questions": len(cases),
        "turns": len(turns),
        "mode": "extractive (no compressor)",
    }

    def reset(deployment: Deployment) -> None:
        with deployment.store() as store:
            result["cards_reset"] = reset_consolidation(store, TENANT)

    with contextlib.ExitStack() as running:
        deployment = deploy_worker(
            running,
            Settings(),
            options.workdir,
            env,
            status=status,
            reopen=options.reopen,
            before_start=reset if options.reopen else lambda d: None,
        )
        settings = deployment.settings
        result |= {"tau": settings.consolidate_tau, "k": options.k or settings.evidence_k}
        if options.reopen is None:
            status(f"streaming {len(turns)} turns of {len(cases)} haystacks")
            t0 = time.monotonic()
            deployment.produce(turns, on_sent=on_sent)
            result["ingest_s"] = round(deployment.drain(timeout_s=7200) - t0, 1)
        else:
            result["reopened"] = str(options.reopen)
        status("asking before consolidation")
        before = _outcomes(cases, asyncio.run(_ask_all(settings, cases, options.k, on_question)))

        run = uuid.uuid4().hex[:6]  # probe tenants of their own: a reopened deployment has seen earlier probes
        status(f"ingesting a {len(probes[0])}-turn probe alone")
        alone = _ingest_rate(deployment, _probe(probes[0], f"probe-alone-{run}"))
        status("consolidating, and ingesting the probe meanwhile")
        port = deployment.env["MEMSTREAM_METRICS_PORT"]
        t0 = time.monotonic()
        deployment.consolidate(tenant=TENANT, scope="all")  # every card (a reopened store has none pending)
        during = _ingest_rate(deployment, _probe(probes[1], f"probe-during-{run}"))
        consolidation_wall = deployment.drain(timeout_s=3600) - t0
        sums = _metric_sums(port, ["memstream_consolidation_seconds_sum", "memstream_consolidation_queues_total"])
        status("asking after consolidation")
        after = _outcomes(cases, asyncio.run(_ask_all(settings, cases, options.k, on_question)))
        deployment.stop_workers()
        result |= inspect_store(deployment, cases)
    result |= {
        "before": summarize_updates(before),
        "after": summarize_updates(after),
        "per_question": [
            {
                "question_id": c.question_id,
                "question": c.question,
                "before": [b.newest_rank, b.stale_rank],
                "after": [a.newest_rank, a.stale_rank],
            }
            for c, b, a in zip(cases, before, after)
        ],
        "consolidation_s": round(sums.get("memstream_consolidation_seconds_sum", 0.0), 1),
        "consolidation_wall_s": round(consolidation_wall, 1),
        "consolidation_queues": int(sums.get("memstream_consolidation_queues_total", 0)),
        "probe_alone": alone,
        "probe_during": during,
        "ingest_during_vs_alone": round(during["tokens_per_s"] / alone["tokens_per_s"], 3),
    }
    return result


__all__ = [
    "UpdateCase",
    "UpdateOutcome",
    "update_case",
    "rank_values",
    "summarize_updates",
    "KnowledgeUpdateOptions",
    "run_knowledge_update_bench",
    "value_similarity",
    "inspect_store",
    "reset_consolidation",
]
