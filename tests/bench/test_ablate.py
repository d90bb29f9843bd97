"""The ablation bench's pure parts: scoring a variant's reply and a baseline held to its tokens."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from memstream.bench.ablate import (
    MAX_TOKENS,
    VARIANTS,
    AblationOptions,
    Outcome,
    adaptive_variants,
    baseline_outcome,
    bench_fill,
    budget_variants,
    chosen_variants,
    retrieval_overrides,
    summarize,
)
from memstream.bench.cases import BenchQuestion
from memstream.bench.e2e_baselines import Unit
from memstream.processors.query.graph import GraphParams
from memstream.processors.query.retrieve import RetrievalParams

Q = BenchQuestion(
    "c:q1", "c", "Where did Ana move?", datetime(2024, 1, 1, tzinfo=timezone.utc), "4", "Lisbon", ("D1:2",)
)


def test_a_baseline_is_held_to_the_variants_tokens_and_scored_like_it():
    ranking = [Unit("p1", "D1:1", "Ana: I like tea."), Unit("p2", "D1:2", "Ana: I moved to Lisbon last year.")]
    tight = baseline_outcome(Q, ranking, 1)
    assert tight.scores == {"evidence_recall": 0.0, "answer_bearing": 0.0}
    roomy = baseline_outcome(Q, ranking, 40)
    assert roomy.scores == {"evidence_recall": 1.0, "answer_bearing": 1.0} and roomy.tokens > tight.tokens


def test_summaries_average_what_was_scored():
    out = summarize(
        [
            Outcome({"evidence_recall": 1.0, "answer_bearing": 0.0}, 10, 1, "1", 30.0),
            Outcome({}, 30, 2, "1", 10.0),
            Outcome({"evidence_recall": 0.5}, 20, 1, "2"),
        ]
    )
    assert out == {
        "questions": 3,
        "evidence_recall": 0.75,
        "answer_bearing": 0.0,
        "tokens": 20.0,
        "rounds": 1.33,
        "p50_ms": 20.0,
        "recall_by_group": {"1": 1.0, "2": 0.5},
    }


def test_every_variant_names_real_retrieval_parameters():
    fields = set(RetrievalParams.__dataclass_fields__)
    for _, params, profile in (*VARIANTS.values(), *adaptive_variants(1000).values(), *budget_variants().values()):
        overrides = retrieval_overrides(params)
        assert set(overrides) <= fields and profile in (None, "lookup", "compose", "replay")
        RetrievalParams(**overrides)  # and values it takes
    assert retrieval_overrides({"graph": 2})["graph"] == GraphParams(hops=2)
    assert retrieval_overrides({"graph": 0})["graph"].hops == 0
    wide = GraphParams(per_item=2.0)
    assert retrieval_overrides({"graph": wide})["graph"] is wide  # a GraphParams is taken as it is


def test_budget_rows_ask_as_the_benches_do():
    # The fixed policy with K = fill_k and the query's own max_tokens, as `bench locomo --sweep-tokens`
    # sends it (the period top-up only runs under the fixed policy); max_tokens is no RetrievalParams field.
    assert bench_fill(1000) == {"evidence_k": 83, MAX_TOKENS: 1000}
    for name, (_, params, _) in budget_variants().items():
        assert params[MAX_TOKENS] in (300, 1000) and MAX_TOKENS not in retrieval_overrides(params), name
        assert "evidence_policy" not in params, name
    assert retrieval_overrides(budget_variants()["fill 1000 tokens, no period top-up"][1]) == {
        "evidence_k": 83,
        "time_top_up": False,
    }


def test_only_picks_variants_by_name_beside_the_default():
    picked = chosen_variants(AblationOptions(run=Path("r"), data=Path("d"), only=("graph",)))
    assert list(picked)[0] == "memstream" and len(picked) > 1
    assert all(n == "memstream" or "graph" in n for n in picked)
