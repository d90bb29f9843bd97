"""The CLI's app, its command groups and what several commands share (console, settings, progress, reading turns)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memstream.config import Settings
from memstream.datasets import demo_conversation_path, jsonl_turns, load_locomo, locomo_turns
from memstream.schemas import Turn
from memstream.schemas.topics import DRAIN_TOPICS
from memstream.topology import reading_groups

from .. import runtime

cli = typer.Typer(
    add_completion=False, no_args_is_help=True, help="memstream: streaming long-term memory for LLM assistants"
)
models = typer.Typer(no_args_is_help=True, help="Local model folders (offline)")
cli.add_typer(models, name="models")
gateway = typer.Typer(help="The HTTP and MCP gateway: a stateless bridge to memstream's topics")
cli.add_typer(gateway, name="gateway")
console = Console(stderr=False)


def default_demo_data() -> Path:
    shared = runtime.REPO_ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
    return shared if shared.exists() else demo_conversation_path()


def own_reading(s: Settings) -> dict[str, list[str]]:
    """The consumer group of this configuration's stages, with the topics it reads."""
    return reading_groups(s.topic_prefix, [s.stage_list()], DRAIN_TOPICS)


def _settings() -> Settings:
    return Settings()


def _load_turns(
    path: Path, tenant: str, conversation: Optional[str], sample: Optional[str], sessions: Optional[int]
) -> list[Turn]:
    if path.suffix == ".jsonl":
        return [t for t in jsonl_turns(path) if conversation is None or t.conversation_id == conversation]
    samples = load_locomo(path)
    if sample:
        samples = [x for x in samples if x.sample_id == sample]
        if not samples:
            raise typer.BadParameter(f"no sample {sample!r} in {path}")
    turns: list[Turn] = []
    for x in samples:
        turns += locomo_turns(
            x, tenant_id=tenant, conversation_id=conversation if len(samples) == 1 else None, max_sessions=sessions
        )
    return turns


def _progress(label: str) -> Progress:
    return Progress(
        TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )
