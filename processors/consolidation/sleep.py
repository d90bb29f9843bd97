"""When a conversation is consolidated, kept as plain dicts in the consolidate stage's table.

Per conversation: ``cards`` (ids written since their last run), ``last_write``, ``last_run`` (wall
clock) and ``last_as_of`` (the ``requested_at`` of the newest finished run). Kafka-free."""

from __future__ import annotations

from concurrent.futures import Executor
from datetime import datetime
from typing import Any, Iterable, Literal, Sequence

from memstream.ports import StoreFilter, StoreHit, VectorStore
from memstream.processors.consolidation.consolidate import ConsolidateParams, Decider, consolidate_card
from memstream.processors.consolidation.versioning import CardView
from memstream.processors.write.index import CARDS
from memstream.schemas import ConsolidationUpdate

PendingState = dict[str, Any]
Scope = Literal["pending", "all"]


def mark_pending(state: PendingState | None, card_ids: Iterable[str], now: float) -> PendingState:
    """Cards of a new write wait for the conversation's next run."""
    state = dict(state or {"cards": [], "last_write": 0.0})
    state["cards"] = list(state["cards"]) + [c for c in dict.fromkeys(card_ids) if c not in state["cards"]]
    state["last_write"] = now
    return state


def is_asleep(state: PendingState, now: float, idle_s: float) -> bool:
    """Cards wait, and neither a write nor a run touched the conversation for ``idle_s``."""
    quiet_since = max(state["last_write"], state.get("last_run", 0.0))
    return bool(state["cards"]) and now - quiet_since >= idle_s


def pending_evictable(state: PendingState, now: float, evict_idle_s: float) -> bool:
    """No card waits and neither a write nor a run touched the conversation for ``evict_idle_s``:
    its entry may be deleted. A later write starts a new one; a command from before the deletion
    finds nothing pending and does nothing (``run_needed``)."""
    quiet_since = max(state.get("last_write", 0.0), state.get("last_run", 0.0))
    return not state.get("cards") and now - quiet_since >= evict_idle_s


def run_needed(state: PendingState | None, requested_at: datetime, scope: Scope) -> bool:
    """A command runs unless a run as of its time (or later) is done -- a broadcast reaches a worker
    once per partition it holds, and a command can come back after its run finished -- or, for
    the pending scope, nothing waits."""
    if state and state.get("last_as_of", 0.0) >= requested_at.timestamp():
        return False
    return scope == "all" or bool(state and state["cards"])


def broadcast_keys(
    pending: Iterable[tuple[str, PendingState | None]], tenant_id: str | None, scope: Scope
) -> list[str]:
    """The conversations (``tenant/conversation`` keys) a broadcast command runs: those with cards
    waiting (scope "all": every one seen), of one tenant or all."""
    prefix = f"{tenant_id}/" if tenant_id else ""
    return [k for k, v in pending if v and (v["cards"] or scope == "all") and k.startswith(prefix)]


def finish_run(state: PendingState | None, done: set[str], now: float, requested_at: datetime) -> PendingState:
    """After a run's updates are on the broker: its cards stop waiting (cards not indexed yet at
    the start stay, and are retried after the next sleep, not at once)."""
    state = dict(state or {"cards": [], "last_write": 0.0})
    state["cards"] = [c for c in state["cards"] if c not in done]
    state["last_run"] = now
    state["last_as_of"] = requested_at.timestamp()
    return state


def cards_to_run(
    store: VectorStore, tenant_id: str, conversation_id: str, card_ids: Sequence[str] | None
) -> list[StoreHit]:
    """The indexed cards a run decides (None: every card of the conversation), with their vectors,
    oldest first."""
    if card_ids is None:
        scope = StoreFilter(equals={"conversation_id": conversation_id})
        limit = store.count(CARDS, tenant_id, where=scope) + 1
    else:
        scope = StoreFilter(equals={"conversation_id": conversation_id}, any_of={"card_id": list(card_ids)})
        limit = len(card_ids) + 1
    hits = store.scroll(CARDS, tenant_id, where=scope, limit=limit, with_vectors=True)
    return sorted(hits, key=lambda h: CardView.from_payload(h.id, h.payload).order)


def decide_queues(
    store: VectorStore,
    decider: Decider,
    tenant_id: str,
    conversation_id: str,
    hits: Sequence[StoreHit],
    params: ConsolidateParams,
    as_of: datetime,
    pool: Executor,
) -> list[ConsolidationUpdate | None]:
    """Each card's update queue decided, in parallel on ``pool``; None where a queue was empty."""
    return list(
        pool.map(lambda h: consolidate_card(store, decider, tenant_id, conversation_id, h, params, as_of=as_of), hits)
    )
