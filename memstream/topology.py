"""The stage topology, declared once: the topics each stage reads and writes and the state table it
keeps. The stage modules (streams/stages/) read their topics from here; consumer groups, changelog
topics, topic admin and the deployments' drains are derived from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from memstream.schemas.topics import Topic


@dataclass(frozen=True)
class StageTopology:
    inputs: tuple[str, ...]  # logical topic names; the first is the stage's main input
    outputs: tuple[str, ...]
    table: str = ""  # a changelog-backed table ("<consumer group>-<table>-changelog"); "" for none
    # The table of its conversations' sealed pieces of recent turn ids (processors/write/seen_ids.py).
    seen_table: str = ""

    @property
    def input(self) -> str:
        return self.inputs[0]


TOPOLOGY: dict[str, StageTopology] = {
    # control: forget requests enter the pipeline here; cards: a turn's fresh-turn point, ahead of its flush.
    # Table: tombstones, keyed "<partition>/<tenant>" (a broadcast forget writes each partition).
    # bulk.turns: history imports, taken only while live work allows (the bulk lane, streams/runtime/bulk.py).
    "compress": StageTopology(
        (Topic.TURNS, Topic.CONTROL, Topic.BULK_TURNS), (Topic.TURNS_COMPRESSED, Topic.CARDS), "forgets"
    ),
    "segment": StageTopology((Topic.TURNS_COMPRESSED,), (Topic.SEGMENTS,), "segmenter", "segmenter-seen"),
    "stm": StageTopology((Topic.SEGMENTS,), (Topic.STM_FLUSH,), "stm", "stm-seen"),
    "extract": StageTopology((Topic.STM_FLUSH,), (Topic.CARDS,)),
    # Writes to the vector store, each write recorded first in record (RecordedStore: the store's
    # durable record, what a rebuild reads); erased forgets go back to control.
    "index": StageTopology((Topic.CARDS,), (Topic.CONTROL, Topic.RECORD)),
    # cards marks a conversation pending; control runs one (or ends a forget); updates applies outcomes
    # (its own output, so a decision is durable before it touches the store).
    "consolidate": StageTopology(
        (Topic.CARDS, Topic.CONTROL, Topic.UPDATES),
        (Topic.CONTROL, Topic.UPDATES, Topic.REPLIES, Topic.AUDIT, Topic.RECORD),
        "consolidation",
    ),
    # Replies go to each query's own reply topic.
    "query": StageTopology((Topic.QUERIES,), ()),
}
STAGES: tuple[str, ...] = tuple(TOPOLOGY)
# Stages that open the vector store. The embedded store locks its folder to one process, so these
# run in a single worker unless MEMSTREAM_QDRANT_URL points at a Qdrant server; the others scale freely.
STORE_STAGES = frozenset({"index", "consolidate", "query"})


def group_id(prefix: str, stages: Sequence[str]) -> str:
    """The consumer group (faust app id) of workers running ``stages``: one group per stage set, so
    workers with the same stages share its partitions."""
    base = f"{prefix}-memstream"
    return base if list(stages) == list(STAGES) else base + "-" + "-".join(stages)


def changelog_topics(prefix: str, stages: Sequence[str]) -> list[str]:
    """The changelog topics of the tables that workers of ``stages`` keep (one set per consumer group)."""
    group = group_id(prefix, stages)
    tables = [table for stage in stages for table in (TOPOLOGY[stage].table, TOPOLOGY[stage].seen_table)]
    return [f"{group}-{table}-changelog" for table in tables if table]


def reading_groups(prefix: str, stage_sets: Iterable[Sequence[str]], topics: Iterable[str]) -> dict[str, list[str]]:
    """Which consumer group reads which of ``topics`` (logical names), for workers of ``stage_sets``;
    topics come back as full names (``<prefix>.<name>``)."""
    topics = list(topics)
    out: dict[str, list[str]] = {}
    for stages in stage_sets:
        read = [f"{prefix}.{t}" for t in topics if any(t in TOPOLOGY[stage].inputs for stage in stages)]
        if read:
            out[group_id(prefix, stages)] = read
    return out
