"""Phase 1 of an end-to-end run (``bench.e2e``): every conversation produced onto the deployment's
turns topic, the worker draining the pipeline, then the tenant consolidated (a command, as at sleep
time). Kafka is the checkpoint: a run interrupted while the worker drains resumes from the committed
offsets, and ``RunState`` keeps the conversations produced and the time and costs so far."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from memstream.bench.cases import TENANT, BenchSet
from memstream.bench.deploy import llm_costs
from memstream.bench.deployment import Deployment
from memstream.bench.e2e_state import E2EOptions, RunState
from memstream.bench.report import source_commit
from memstream.schemas.topics import DRAIN_TOPICS, FRONT_TOPICS, INGEST_TOPICS, Topic

INDEX_BACKLOG = 64  # memory writes left for the index stage when the next conversation goes in
SCRAPE_EVERY_S = 2.0  # the worker's metrics, read while it drains


def add_costs(into: dict[str, dict[str, int]], more: dict[str, dict[str, int]]) -> None:
    for stage, cost in more.items():
        mine = into.setdefault(stage, {})
        for k, v in cost.items():
            mine[k] = mine.get(k, 0) + v


class Ingestion:
    """One ingest segment: produce what is left, drain, consolidate; ``progress`` sees the turns indexed."""

    def __init__(
        self,
        bench: BenchSet,
        options: E2EOptions,
        state: RunState,
        save: Callable[[], None],
        *,
        status: Callable[[str], None],
        progress: Callable[[int, int], None],
    ):
        self.bench, self.options, self.state, self.save = bench, options, state, save
        self.status, self.progress = status, progress
        self.scraped: dict[str, Any] = {"llm": {}, "other": {}}  # the worker's counters, last read
        self.last_scrape = 0.0
        self.port = ""

    def run(self, deployment: Deployment) -> None:
        self._check_broker(deployment)
        self.status("starting a worker (all stages)")
        deployment.start_worker("ingest")
        self.port = deployment.env["MEMSTREAM_METRICS_PORT"]
        t0 = time.monotonic()
        ingesting = not self.state.ingested
        try:
            if ingesting:
                self._produce_and_drain(deployment, t0)
                ingesting = False
            if self.options.consolidate and not self.state.consolidated:
                self._consolidate(deployment)
        finally:
            self._scrape()
            if ingesting:  # interrupted: the time and progress so far count, the rest resumes from Kafka
                self._end_segment(time.monotonic() - t0, done=False)
            # The worker's counters cover its whole life: this segment's ingestion and consolidation.
            add_costs(self.state.construction, self.scraped["llm"])
            self.save()
        deployment.stop_workers()
        with deployment.store() as store:
            self.state.store_counts = {
                c: store.count(c, TENANT) for c in ("cards", "scenes", "triggers", "turns", "profiles")
            }
        self.save()

    def _scrape(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.scraped["llm"], self.scraped["other"] = llm_costs(self.port)
        written = int(self.scraped["other"].get("memstream_points_written_total|turns", 0))
        self.progress(min(self.bench.turns, self.state.indexed_turns + written), self.bench.turns)

    def _on_lag(self, _lag: dict[str, int]) -> None:
        if time.monotonic() - self.last_scrape >= SCRAPE_EVERY_S:
            self.last_scrape = time.monotonic()
            self._scrape()

    def _produce_and_drain(self, deployment: Deployment, t0: float) -> None:
        conversations = self.bench.conversations
        for conversation_id, turns in conversations.items():
            if conversation_id in self.state.produced:
                continue
            self._wait_for_room(deployment)
            self.status(f"producing {conversation_id} ({len(self.state.produced) + 1} of {len(conversations)})")
            deployment.produce(turns)
            self.state.produced.append(conversation_id)
            self.state.produced_turns += len(turns)
            self.save()
        self.status(f"ingesting {self.bench.turns} turns of {len(conversations)} conversations")
        finished = deployment.drain(timeout_s=7 * 24 * 3600, topics=INGEST_TOPICS, progress=self._on_lag)
        self._scrape()
        self._end_segment(finished - t0, done=True)

    def _consolidate(self, deployment: Deployment) -> None:
        self.status(f"consolidating tenant {TENANT!r}")
        t0 = time.monotonic()
        deployment.consolidate(tenant=TENANT, scope="pending")
        self.state.consolidation_s = round(deployment.drain(timeout_s=24 * 3600, topics=DRAIN_TOPICS) - t0, 1)
        self._scrape()
        self.state.consolidation_decisions = {
            k.split("|", 1)[1]: int(v)
            for k, v in self.scraped["other"].items()
            if k.startswith("memstream_consolidation_decisions_total|")
        }
        self.state.consolidated = True

    def _wait_for_room(self, deployment: Deployment) -> None:
        """Produce the next conversation once the stages before the index have taken the last one in
        and the index has at most ``INDEX_BACKLOG`` memory writes to go. All at once, the segmenter
        (which embeds on the event loop) would take in the whole backlog first while the later
        stages idle; far ahead, its turn vectors would leave the embedding cache before the index
        stage reuses them. This way the index stage (the slowest) always has work, and the
        segmenter works on the next conversation meanwhile."""
        while True:
            lag = deployment.lag(INGEST_TOPICS)
            self._on_lag(lag)
            if sum(lag[t] for t in FRONT_TOPICS) == 0 and lag[Topic.CARDS] <= INDEX_BACKLOG:
                return
            time.sleep(0.5)

    def _end_segment(self, seconds: float, *, done: bool) -> None:
        written = int(self.scraped["other"].get("memstream_points_written_total|turns", 0))
        self.state.ingest_seconds = round(self.state.ingest_seconds + seconds, 1)
        self.state.ingest_segments += 1
        commit = source_commit()
        if commit and commit not in self.state.ingest_commits:
            self.state.ingest_commits.append(commit)
        self.state.indexed_turns = min(self.bench.turns, self.state.indexed_turns + written)
        self.state.ingested = done
        self.save()

    def _check_broker(self, deployment: Deployment) -> None:
        """A resumed run needs the turns it produced: a broker that lost them would leave holes."""
        if self.state.produced_turns and deployment.message_count("turns") < self.state.produced_turns:
            raise RuntimeError(
                f"the broker no longer holds the turns this run produced into {deployment.settings.topic('turns')}; "
                "pass --fresh to start over"
            )
