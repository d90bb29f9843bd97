"""The one configuration object. Every knob is an environment variable with prefix ``MEMSTREAM_``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict

from memstream.settings.consolidation import ConsolidationSettings
from memstream.settings.gateway import GatewaySettings
from memstream.settings.kafka import KafkaSettings
from memstream.settings.llm import LLMSettings
from memstream.settings.models import ModelSettings
from memstream.settings.paths import absolute_path
from memstream.settings.query import QueryPathSettings
from memstream.settings.store import StoreSettings
from memstream.settings.worker import WorkerSettings
from memstream.settings.write import WritePathSettings
from memstream.topology import STAGES

__all__ = ["Settings", "absolute_path"]  # absolute_path: for the benches that lay out a deployment


class Settings(
    # pydantic reads the groups last to first: fields and validators keep the order Kafka, workers,
    # store, LLM, models, write path, query path, consolidation, gateway.
    GatewaySettings,
    ConsolidationSettings,
    QueryPathSettings,
    WritePathSettings,
    ModelSettings,
    LLMSettings,
    StoreSettings,
    WorkerSettings,
    KafkaSettings,
    BaseSettings,
):
    """Runtime configuration, read from ``MEMSTREAM_*`` environment variables (and ``.env``): the
    groups of memstream/settings/, and what is derived from more than one of them."""

    model_config = SettingsConfigDict(env_prefix="MEMSTREAM_", env_file=".env", extra="ignore")

    @property
    def state_evict_after_s(self) -> float:
        """Idle seconds before a quiet conversation's table entries go: STATE_EVICT_IDLE_S, and never
        before its idle flush and its sleep-time run are due (a deployment that turns consolidation off
        with a huge SLEEP_IDLE_S keeps its entries as long)."""
        return max(self.state_evict_idle_s, self.stm_idle_s, self.sleep_idle_s)

    def stage_list(self) -> list[str]:
        if self.stages.strip() in ("", "all"):
            return list(STAGES)
        chosen = [s.strip() for s in self.stages.split(",") if s.strip()]
        unknown = sorted(set(chosen) - set(STAGES))
        if unknown:
            raise ValueError(f"unknown stages {unknown}; known: {', '.join(STAGES)}")
        return [s for s in STAGES if s in chosen]

    @property
    def effective_extract_mode(self) -> Literal["llm", "extractive"]:
        if self.extract_mode == "auto":
            return "llm" if self.llm_enabled else "extractive"
        if self.extract_mode == "llm" and not self.llm_enabled:
            raise ValueError("MEMSTREAM_EXTRACT_MODE=llm needs MEMSTREAM_LLM_BASE_URL")
        return self.extract_mode

    @property
    def effective_query_planner(self) -> Literal["llm", "rules", "hybrid"]:
        if self.query_planner == "auto":
            return "llm" if self.llm_enabled else "rules"
        if self.query_planner in ("llm", "hybrid") and not self.llm_enabled:
            raise ValueError(f"MEMSTREAM_QUERY_PLANNER={self.query_planner} needs MEMSTREAM_LLM_BASE_URL")
        return self.query_planner

    @property
    def store_path(self) -> Path:
        return self.qdrant_path or (self.data_dir / f"qdrant-{self.qdrant_embedded}")
