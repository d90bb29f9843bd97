"""The LLM endpoint, and how much of it a worker may use at once."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TenantLlmBudget(BaseModel):
    """What one tenant's extraction and consolidation may spend on the LLM per budget window."""

    calls: int | None = Field(None, ge=0, description="LLM calls (unset: no cap)")
    tokens: int | None = Field(None, ge=0, description="Prompt and completion tokens together (unset: no cap)")


class LLMSettings(BaseModel):
    """The OpenAI-compatible endpoint, and each worker's share of it (calls in flight, provider limits)."""

    llm_base_url: str | None = Field(None, description="OpenAI-compatible endpoint; unset = no LLM (extractive mode)")
    llm_model: str = Field("gpt-4o-mini")
    llm_api_key: str = Field("not-needed")
    llm_timeout_s: float = Field(120.0)
    llm_port: int = Field(
        8011, description="Port of the local LLM server started by infra/llm (memstream up --local-llm, demo)"
    )
    llm_max_tokens: int = Field(1024)
    llm_retries: int = Field(
        1, ge=0, description="Retries of an LLM call after a timeout, connection, rate-limit or server error"
    )

    llm_tenant_budgets: dict[str, TenantLlmBudget] = Field(
        default_factory=dict,
        description="Tenant -> {calls, tokens} its extraction and consolidation may spend per window (JSON; '*': "
        "every tenant not named). Over it a flush is extracted without the LLM and a consolidation run decides "
        "by rules (memories still made, never dropped), until the window ends. Summed over every worker",
    )
    llm_budget_window_s: float = Field(
        3600.0, ge=60, description="Budget window: budgets reset when it ends (windows aligned to the epoch, UTC)"
    )

    # --- LLM concurrency and provider limits ---------------------------------------------------
    llm_in_flight: int = Field(
        8,
        ge=1,
        description="LLM-bound messages each of the extract, query and consolidate stages keeps in progress per "
        "worker, across conversations (one conversation's messages stay in order); 1 = one at a time",
    )
    extract_in_flight: int | None = Field(None, ge=1, description="The extract stage's own (unset: llm_in_flight)")
    query_in_flight: int | None = Field(
        None, ge=1, description="The query stage's own, for LLM-answered questions (unset: llm_in_flight)"
    )
    consolidate_in_flight: int | None = Field(
        None, ge=1, description="Consolidation runs in progress at once (unset: llm_in_flight)"
    )
    llm_rpm: float = Field(
        0.0, ge=0, description="Requests per minute the provider allows this worker for llm_model (0 = no limit)"
    )
    llm_tpm: float = Field(
        0.0,
        ge=0,
        description="Tokens (prompt + completion) per minute the provider allows this worker for llm_model "
        "(0 = no limit); a call waits for budget before it is sent",
    )
    llm_max_concurrency: int = Field(
        64,
        ge=1,
        description="Most calls in flight to the LLM endpoint per worker: after a 429 fewer (halved), after a run "
        "of successes one more, up to this",
    )
    llm_stable_schemas: bool = Field(
        True,
        description="Extraction and consolidation send the same output schema on every call (a provider caches "
        "it with the prompt's prefix: OpenAI puts it before the system message); false: enums of each flush's "
        "turn ids and each queue's candidates, which a constrained decoder (the local server) keeps to",
    )
    llm_rate_limit_wait_s: float = Field(
        300.0,
        ge=0,
        description="How long one call waits out 429s (their Retry-After, else back-off) before it fails",
    )

    def in_flight(self, stage: str) -> int:
        """LLM-bound messages ``stage`` (extract, query or consolidate) keeps in progress per worker."""
        own = {
            "extract": self.extract_in_flight,
            "query": self.query_in_flight,
            "consolidate": self.consolidate_in_flight,
        }
        return own[stage] or self.llm_in_flight

    @property
    def llm_enabled(self) -> bool:
        return bool(self.llm_base_url)
