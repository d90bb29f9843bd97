"""consolidate: sleep-time consolidation. Memory writes mark their cards pending per conversation (a
changelog table); an idle conversation, the schedule or a command on ``control`` runs its update
queues in parallel; outcomes go to ``updates``, whose agent applies them to the store."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, get_args

from memstream.processors.consolidation.consolidate import (
    ConsolidateParams,
    Decider,
    LlmDecider,
    RuleDecider,
    apply_update,
    refers_to_erased_cards,
)
from memstream.processors.consolidation.sleep import (
    broadcast_keys,
    cards_to_run,
    decide_queues,
    finish_run,
    is_asleep,
    mark_pending,
    pending_evictable,
    run_needed,
)
from memstream.processors.forgetting.forget import ForgetScope, existing_cards, scrub_pending
from memstream.schemas import (
    ConsolidateCommand,
    ConsolidationUpdate,
    Forget,
    ForgetAudit,
    ForgetReply,
    MemoryWrite,
    RetainedCopy,
    SchemaError,
    decode_message,
)
from memstream.schemas.keys import check_key, key_problem
from memstream.schemas.memory import ConsolidationAction
from memstream.schemas.signature import SignatureRefused
from memstream.schemas.topics import TEXT_KEEPING_TOPICS, Topic, message_kind, reply_topic_problem
from memstream.topology import TOPOLOGY

from .api import TRACES, Out, Record, Slot, StageContext, StageResult, conversation_lane, init_series
from .forgetting import onward, scrub_table

log = logging.getLogger(__name__)

STAGE = "consolidate"
TOPICS = TOPOLOGY[STAGE]  # its topics and table: memstream/topology.py
RUN_CHUNK = 64  # update queues a run decides before it sends their outcomes


TRACES_KEPT = 64  # writes whose trace a run links to, at most (the newest)


class Consolidation:
    """The stage's three agents (writes mark cards pending; control runs a conversation, fans a
    broadcast out or ends a forget; updates are applied), the idle timer and the schedule."""

    def __init__(self, ctx: StageContext):
        self.ctx = ctx
        self.s, self.services, self.metrics = ctx.s, ctx.services, ctx.metrics
        self.pending = ctx.table(STAGE, TOPICS.table)
        self.control, self.updates = self.s.topic(Topic.CONTROL), self.s.topic(Topic.UPDATES)
        self.params = ConsolidateParams(tau=self.s.consolidate_tau, top_n=self.s.consolidate_top_n)
        llm = self.services.llm_for("consolidate")
        self.rules = RuleDecider(self.params)
        self.decider: Decider = (
            LlmDecider(llm, self.params, stable_schema=self.s.llm_stable_schemas)
            if llm is not None
            else RuleDecider(self.params)
        )
        # With an LLM, runs of several conversations go on at once (``in_flight``), each deciding
        # CONSOLIDATE_PARALLEL queues at a time.
        self.in_flight = self.s.in_flight(STAGE) if llm is not None else 1
        self.pool = ThreadPoolExecutor(
            max_workers=self.s.consolidate_parallel * self.in_flight, thread_name_prefix="consolidate"
        )
        log.info(
            "consolidation: %s decisions, idle after %.0fs, schedule %s",
            type(self.decider).__name__,
            self.s.sleep_idle_s,
            f"every {self.s.consolidate_every_s:.0f}s" if self.s.consolidate_every_s else "off",
        )

    async def on_write(self, record: Record) -> StageResult:
        write = decode_message(TOPICS.input, record.value)
        if not isinstance(write, MemoryWrite):
            # A forget (the index stage erases, control brings it back) or a fresh turn (no cards).
            return StageResult()
        if write.cards:
            state = mark_pending(self.pending.get(write.key), [c.card_id for c in write.cards], time.time())
            if record.traceparent:  # the run that decides these cards links to the write's trace
                traces = [t for t in state.get(TRACES, []) if t != record.traceparent] + [record.traceparent]
                state[TRACES] = traces[-TRACES_KEPT:]
            await self.ctx.save_state(self.pending, write.key, state)
        return StageResult()

    def observe(self, outcomes: list[ConsolidationUpdate | None], new_cards: bool) -> list[Out]:
        metrics, outs = self.metrics, []
        for update in outcomes:
            metrics.consolidation_queues.inc()
            if update is None:
                metrics.consolidation_candidates.observe(0)
                continue
            metrics.consolidation_candidates.observe(len(update.candidates))
            for d in update.decisions:
                metrics.consolidation_decisions.labels(d.action, d.decided_by).inc()
            for cost in update.costs:
                metrics.count_llm(cost.stage, cost.model, cost.calls, cost.prompt_tokens, cost.completion_tokens)
            if new_cards and update.written_at is not None:  # a --all run re-decides old cards: no lag
                metrics.consolidation_lag.observe(max(0.0, time.time() - update.written_at.timestamp()))
            outs.append(Out(self.updates, update.key, update))
        return outs

    async def on_forget(self, record: Record, forget: Forget) -> StageResult:
        """The last step of a forget, after the store erased it: pending cards that no longer exist
        leave the table, then the reply and the audit record go out."""
        s, scope = self.s, ForgetScope.of(forget)

        async def scrub(state: Any) -> tuple[Any, int]:
            # Which pending cards the index stage erased: a store read, off the loop.
            cards = state.get("cards", [])
            existing = await asyncio.to_thread(existing_cards, self.services.store, scope.tenant_id, cards)
            return scrub_pending(state, existing)

        removed = await scrub_table(self.ctx, self.pending, record.partition, scope, scrub)
        self.metrics.forgotten.labels("table").inc(removed)
        counts = onward(forget, {"table:consolidation": removed}).counts
        done_at = datetime.now(timezone.utc)
        until = done_at + timedelta(seconds=s.topic_retention_s + s.topic_segment_s)
        retained = [RetainedCopy(topic=s.topic(name), until=until) for name in TEXT_KEEPING_TOPICS]
        reply = ForgetReply(
            forget_id=forget.forget_id,
            tenant_id=forget.tenant_id,
            part=forget.part,
            parts=forget.parts,
            counts=counts,
            retained=retained,
            done_at=done_at,
        )
        audit = ForgetAudit(
            forget_id=forget.forget_id,
            tenant_id=forget.tenant_id,
            conversation_id=forget.conversation_id,
            by_speaker=forget.speaker is not None,
            turn_ids_given=len(forget.turn_ids),
            part=forget.part,
            parts=forget.parts,
            counts=counts,
            requested_at=forget.requested_at,
            done_at=done_at,
        )
        log.info("forget %s part %d/%d done: %s", forget.forget_id, forget.part, forget.parts, counts)
        return StageResult(
            [
                Out(forget.reply_topic, forget.key, reply),
                Out(s.topic(Topic.AUDIT), f"{forget.forget_id}/{forget.part}", audit),
            ]
        )

    async def on_command(self, record: Record) -> StageResult:
        if message_kind(record.value) == "forget":
            # A request is the ingest group's: it enters the pipeline there (and a malformed or
            # wrongly keyed one is dead-lettered there, once). This group ends a forget the index
            # stage erased.
            try:
                forget = Forget.from_bytes(record.value)
            except SchemaError:
                return StageResult()
            if forget.phase != "erased" or key_problem(record.key, forget) or not self.signed(record):
                return StageResult()
            if reply_topic_problem(self.s.topic_prefix, forget.reply_topic):  # the ingest group dead-letters it
                return StageResult()
            return await self.on_forget(record, forget)
        command = ConsolidateCommand.from_bytes(record.value)
        check_key(record.key, command)
        self.ctx.check_signature(record)
        if command.conversation_id is None:
            return self.fan_out(command)
        key = command.key
        state = self.pending.get(key)
        if command.reason == "idle" and state and self.evictable(state):
            await self.ctx.delete_state(STAGE, self.pending, key)
            return StageResult()
        if not run_needed(state, command.requested_at, command.scope):
            return StageResult()
        # A run joins many writes: a trace of its own, linked to each write's.
        with self.services.tracing.joining(
            "memstream.consolidate.run", (state or {}).get(TRACES, []), attributes={"memstream.reason": command.reason}
        ):
            await self.run(key, command, state)
        return StageResult()

    def signed(self, record: Record) -> bool:
        try:
            self.ctx.check_signature(record)
        except SignatureRefused:
            return False
        return True

    def fan_out(self, command: ConsolidateCommand) -> StageResult:
        """A broadcast: a keyed command per pending conversation here, so each runs in the partition
        (and table changelog) that owns it. Each copy of the broadcast fans out again; run_needed
        runs each once."""
        keys = broadcast_keys(list(self.pending.items()), command.tenant_id, command.scope)
        return StageResult(
            [
                Out(
                    self.control,
                    k,
                    ConsolidateCommand(
                        tenant_id=k.split("/", 1)[0],
                        conversation_id=k.split("/", 1)[1],
                        reason=command.reason,
                        requested_at=command.requested_at,
                        scope=command.scope,
                    ),
                )
                for k in keys
            ]
        )

    async def run(self, key: str, command: ConsolidateCommand, state: Any) -> None:
        s, metrics = self.s, self.metrics
        started = time.perf_counter()
        tenant, conversation = command.tenant_id or "", command.conversation_id or ""
        hits = await asyncio.to_thread(
            cards_to_run,
            self.services.store,
            tenant,
            conversation,
            None if command.scope == "all" or state is None else state["cards"],
        )
        log.info("consolidating %s: %d queues", key, len(hits))
        # Outcomes go out a chunk at a time (memory stays flat, the store is updated as the run goes).
        # A crash mid-run redelivers the command: the run is redone as of the same time, and the
        # updates already out are replays (idempotent).
        for i in range(0, len(hits), RUN_CHUNK):
            chunk_started = time.perf_counter()
            decider = self.decider
            if isinstance(decider, LlmDecider) and self.ctx.llm_budget.over(tenant):
                decider = self.rules  # over its LLM budget: the tenant's chunk is decided by rules
                self.ctx.llm_budget.fell_back(tenant, STAGE)
            outcomes = await asyncio.to_thread(
                decide_queues,
                self.services.store,
                decider,
                tenant,
                conversation,
                hits[i : i + RUN_CHUNK],
                self.params,
                command.requested_at,
                self.pool,
            )
            self.ctx.llm_budget.spend(tenant, [cost for update in outcomes if update for cost in update.costs])
            await self.ctx.produce("consolidate.run", self.observe(outcomes, command.scope == "pending"))
            log.debug("consolidating %s: %d of %d queues out", key, min(i + RUN_CHUNK, len(hits)), len(hits))
            if s.consolidate_yield and self.ctx.busy_ingesting():
                # Sleep-time work gives way while this worker ingests (they share its cores and GIL).
                await asyncio.sleep(s.consolidate_yield * (time.perf_counter() - chunk_started))
        # The updates are acknowledged by the broker before the cards stop being pending.
        state = finish_run(self.pending.get(key), {h.id for h in hits}, time.time(), command.requested_at)
        state.pop(TRACES, None)  # linked by this run
        await self.ctx.save_state(self.pending, key, state)
        metrics.consolidation_runs.labels(command.reason).inc()
        metrics.consolidation_seconds.observe(time.perf_counter() - started)
        log.info("consolidated %s: %d queues in %.1fs", key, len(hits), time.perf_counter() - started)

    def apply(self, update: ConsolidationUpdate) -> None:
        with self.services.store_lock:
            if refers_to_erased_cards(self.services.store, update):
                log.info("update %s names an erased card: not applied", update.update_id)
                self.metrics.forgotten.labels("update").inc()
                return
            apply_update(self.services.store, self.services.embedder, update)

    async def on_update(self, record: Record) -> StageResult:
        update = ConsolidationUpdate.from_bytes(record.value)
        await asyncio.to_thread(self.apply, update)
        return StageResult()

    def evictable(self, data: dict[str, Any]) -> bool:
        return pending_evictable(data, time.time(), self.s.state_evict_after_s)

    def asleep(self, data: dict[str, Any]) -> bool:
        return is_asleep(data, time.time(), self.s.sleep_idle_s)

    async def scheduled(self) -> None:
        """Each worker schedules the conversations its own partitions hold, keyed to them."""
        for key, data in list(self.pending.items()):
            if data and data["cards"]:
                tenant, conv = key.split("/", 1)
                command = ConsolidateCommand(
                    tenant_id=tenant, conversation_id=conv, reason="schedule", requested_at=datetime.now(timezone.utc)
                )
                await self.ctx.send(self.control, key.encode(), command.to_bytes())


def run_slot(record: Record) -> Slot:
    """Runs of different conversations side by side; one conversation's commands (and a forget's
    end) in order; a broadcast (a fan-out, a tenant's forget) alone."""
    return Slot(conversation_lane(record.key, record.partition), "llm")


def register(ctx: StageContext) -> None:
    stage = Consolidation(ctx)
    ctx.agent(STAGE, TOPICS.input, stage.on_write)
    if stage.in_flight > 1:
        ctx.agent("consolidate.run", Topic.CONTROL, stage.on_command, slots={"llm": stage.in_flight}, slot_of=run_slot)
    else:
        ctx.agent("consolidate.run", Topic.CONTROL, stage.on_command)
    ctx.agent("consolidate.apply", Topic.UPDATES, stage.on_update)
    init_series(ctx.metrics.consolidation_decisions, get_args(ConsolidationAction), ("llm", "rules"))
    init_series(ctx.metrics.consolidation_runs, get_args(ConsolidateCommand.model_fields["reason"].annotation))
    ctx.idle_timer(
        TOPICS.table,
        stage.pending,
        stage.asleep,
        stage.control,
        lambda tenant, conv: ConsolidateCommand(
            tenant_id=tenant, conversation_id=conv, reason="idle", requested_at=datetime.now(timezone.utc)
        ),
    )
    # A conversation with nothing pending, quiet for STATE_EVICT_IDLE_S, leaves the table by the same command.
    ctx.evict_timer(
        STAGE,
        stage.pending,
        stage.evictable,
        stage.control,
        lambda tenant, conv: ConsolidateCommand(
            tenant_id=tenant, conversation_id=conv, reason="idle", requested_at=datetime.now(timezone.utc)
        ),
    )
    if ctx.s.consolidate_every_s > 0:
        ctx.app.timer(interval=ctx.s.consolidate_every_s, name="memstream.consolidation.schedule")(stage.scheduled)
