"""The query path: planning, retrieval, evidence and the answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class QueryPathSettings(BaseModel):
    """How a question is planned, searched, expanded and answered."""

    evidence_k: int = Field(10, ge=1)
    replay_window: int = Field(1, ge=0, description="Raw turns either side of a provenance turn in Replay")
    replay_max_tokens: int = Field(1200, ge=64)
    fresh_turns_k: int = Field(
        3, ge=0, description="Fresh turns (not yet in any card) a reply adds after its evidence (0 = none)"
    )
    query_planner: Literal["auto", "llm", "rules", "hybrid"] = Field(
        "auto",
        description="auto = one LLM planner call when an LLM is configured, else the rule planner; "
        "hybrid = the rule planner, and an LLM planner call only for a question the rules doubt "
        "(processors/query/plan.py: rule_doubts), for the doubted fields",
    )
    query_candidates: int = Field(30, ge=1, description="Candidates per signal (dense, BM25) and query text")
    evidence_policy: Literal["fixed", "adaptive"] = Field(
        "fixed",
        description="fixed = EVIDENCE_K items; adaptive = as many as the fused scores hold up for, "
        "within the query's max_tokens or EVIDENCE_MAX_TOKENS",
    )
    evidence_dropoff: float = Field(
        0.5, gt=0, le=1, description="Adaptive: stop at the first item scoring under this share of the best"
    )
    evidence_max_tokens: int = Field(1000, ge=16, description="Adaptive: the evidence budget when a query sets none")
    research_rounds: int = Field(
        1,
        ge=1,
        le=5,
        description="Retrieval rounds for multi-hop plans (aggregate, compare, distributed): each further round "
        "searches with the names the best evidence mentions; 1 = no research loop",
    )
    graph_hops: int = Field(
        1,
        ge=0,
        le=3,
        description="Graph expansion: hops from the best evidence along shared entities, scenes and adjacent "
        "turns (0 = off)",
    )
    graph_per_hop: int = Field(16, ge=1, le=100, description="Graph expansion: cards kept per hop (at least)")
    graph_per_item: float = Field(
        0.5, ge=0, le=4, description="Graph expansion: also at least this many cards per hop per evidence item asked"
    )
    content_query: Literal["none", "semantic", "vote", "both"] = Field(
        "semantic",
        description="The question with its speakers' names made 'someone': 'semantic' ranks cards by closeness to it "
        "instead of to the question (card texts start with their speaker's name, which otherwise wins alone); "
        "'vote' adds its dense search as one more fusion vote; 'both'; 'none'",
    )
    trigger_threshold: float = Field(
        0.35, description="Trigger similarity that promotes its card or scene (calibrated for MiniLM)"
    )
    cascade_topics: int = Field(2, ge=1, description="Compose: topics of scenes kept whole")
    query_timeout_s: float = Field(
        30.0,
        gt=0,
        description="How long a client waits for a reply; the query carries "
        "the deadline and the worker cuts its LLM calls to fit",
    )
    answer_max_tokens: int = Field(256, ge=16, description="Completion token limit of the answer call")
