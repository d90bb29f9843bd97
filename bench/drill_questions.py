"""The disaster drill's questions (``memstream bench drill``): a thread asking evidence-only
questions throughout, each outcome counted under the phase of the drill it was asked in, and the
gold-turn recall of a fixed set of LoCoMo questions, asked between the phases."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter, defaultdict
from typing import Any, Sequence

from memstream.bench.cases import BenchQuestion, score
from memstream.bench.e2e_ask import provenance
from memstream.bench.plots import pyplot, save_figure
from memstream.bench.scoring import percentile
from memstream.client import AsyncMemoryClient, QueryTimeout
from memstream.config import Settings
from memstream.schemas.base import base_turn_id

OUTCOMES = ("ok", "error_reply", "unanswered", "send_error")


class Asker:
    """Questions asked one after another, every ``every_s``, in a thread of its own, until ``stop``.
    A question that gets no reply within ``timeout_s`` is unanswered; an error reply (the store is
    gone) is an answer, counted apart. ``phase`` names the drill's step the next questions belong to."""

    def __init__(
        self, settings: Settings, questions: Sequence[BenchQuestion], *, tenant: str, every_s: float, timeout_s: float
    ):
        self.settings, self.questions, self.tenant = settings, list(questions), tenant
        self.every_s, self.timeout_s = every_s, timeout_s
        self.started = time.monotonic()
        self.phase = "before"
        self.marks: list[tuple[float, str]] = [(0.0, "before")]  # (seconds into the run, phase begun)
        self.timeline: list[tuple[float, str, str, float]] = []  # (asked at s, phase, outcome, reply ms)
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._ask()), name="drill-asker", daemon=True)

    def start(self) -> Asker:
        self._thread.start()
        return self

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.marks.append((round(time.monotonic() - self.started, 2), phase))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    async def _ask(self) -> None:
        client: AsyncMemoryClient | None = None
        i = 0
        while not self._stop.is_set():
            q = self.questions[i % len(self.questions)]
            i += 1
            phase, t0 = self.phase, time.monotonic()
            try:
                if client is None:
                    client = AsyncMemoryClient(self.settings)
                    await asyncio.wait_for(client.__aenter__(), 30)
                reply = await client.ask(
                    q.text,
                    tenant_id=self.tenant,
                    conversation_id=q.conversation_id,
                    question_time=q.asked_at,
                    answer=False,
                    timeout_s=self.timeout_s,
                    raise_on_error=False,
                )
                outcome = "ok" if reply.ok else "error_reply"
                if not reply.ok:
                    self.errors[(reply.error or "").split(":", 1)[0][:60]] += 1
            except QueryTimeout:
                outcome = "unanswered"
            except Exception as exc:  # the broker unreachable: the client is made again
                outcome = "send_error"
                self.errors[type(exc).__name__] += 1
                if client is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(client.__aexit__(None, None, None), 10)
                client = None
            self.timeline.append((round(t0 - self.started, 2), phase, outcome, round((time.monotonic() - t0) * 1000)))
            await asyncio.sleep(max(0.0, self.every_s - (time.monotonic() - t0)))
        if client is not None:
            await client.__aexit__(None, None, None)

    def summary(self) -> dict[str, Any]:
        """Per phase: each outcome's count and the slowest reply; the totals."""
        by_phase: dict[str, dict[str, Any]] = {}
        latencies: dict[str, list[float]] = defaultdict(list)
        for _, phase, outcome, ms in self.timeline:
            row = by_phase.setdefault(phase, dict.fromkeys(OUTCOMES, 0))
            row[outcome] += 1
            latencies[phase].append(ms)
        for phase, row in by_phase.items():
            row["p99_ms"] = round(percentile(latencies[phase], 99))
            row["max_ms"] = max(latencies[phase])
        totals = Counter(outcome for _, _, outcome, _ in self.timeline)
        errors = [ms for _, _, outcome, ms in self.timeline if outcome == "error_reply"]
        return {
            "asked": len(self.timeline),
            **{outcome: totals[outcome] for outcome in OUTCOMES},
            "error_reply_max_ms": max(errors, default=None),
            "timeout_s": self.timeout_s,
            "by_phase": by_phase,
            "errors": dict(self.errors),
            "marks": self.marks,
            "timeline": self.timeline,
        }


def found_gold(q: BenchQuestion, turn_ids: Sequence[str]) -> list[str]:
    """The question's gold turns among the returned evidence's turns (a chunk counts as its turn)."""
    found = {base_turn_id(t) for t in turn_ids}
    return sorted(t for t in q.gold_turns if t in found)


def ask_recall(settings: Settings, questions: Sequence[BenchQuestion], *, tenant: str, timeout_s: float) -> dict:
    """Each question once, evidence only: the gold turns it found, and the mean evidence recall."""

    async def go() -> dict[str, Any]:
        found: dict[str, list[str] | None] = {}
        recalls: list[float] = []
        async with AsyncMemoryClient(settings) as client:
            for q in questions:
                reply = await client.ask(
                    q.text,
                    tenant_id=tenant,
                    conversation_id=q.conversation_id,
                    question_time=q.asked_at,
                    answer=False,
                    timeout_s=timeout_s,
                    raise_on_error=False,
                )
                turns = provenance(reply) if reply.ok else []
                found[q.qid] = found_gold(q, turns) if reply.ok else None
                recalls.append(score(q, turns).get("evidence_recall", 0.0))
        return {
            "questions": len(questions),
            "errors": sum(v is None for v in found.values()),
            "recall": round(sum(recalls) / len(recalls), 4) if recalls else None,
            "found": found,
        }

    return asyncio.run(go())


def recall_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Questions whose found gold turns differ between two ``ask_recall`` results, and of those the
    ones that found fewer afterwards (an error reply finds none); each changed one named with its
    gold turns found before and after."""
    pairs = {qid: (turns or [], after["found"].get(qid) or []) for qid, turns in before["found"].items()}
    changed = {qid: {"before": old, "after": new} for qid, (old, new) in pairs.items() if old != new}
    return {
        "recall_changed": len(changed),
        "recall_lower": sum(len(c["after"]) < len(c["before"]) for c in changed.values()),
        "recall_changed_questions": changed,
    }


PHASE_COLORS = {"disaster": "tab:red", "recovery": "tab:orange", "reembed": "tab:blue"}
OUTCOME_STYLES = {
    "ok": ("tab:green", "o"),
    "error_reply": ("tab:orange", "s"),
    "unanswered": ("black", "v"),
    "send_error": ("tab:red", "x"),
}


def plot_questions(result: dict[str, Any], out: Any) -> Any:
    """Per store: every question's reply time over the drill by outcome, the phases shaded."""
    plt = pyplot()
    runs = result["stores"]
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 3.2 * len(runs)), squeeze=False)
    for ax, (store, run) in zip(axes[:, 0], runs.items()):
        asked = run["questions"]
        marks = asked["marks"] + [(asked["timeline"][-1][0] if asked["timeline"] else 0.0, "end")]
        for (start, phase), (end, _) in zip(marks, marks[1:]):
            kind = phase.split(":")[0]
            if kind in PHASE_COLORS:
                ax.axvspan(start, end, color=PHASE_COLORS[kind], alpha=0.12)
            ax.text(start, 1.02, phase, transform=ax.get_xaxis_transform(), fontsize=6, rotation=30)
        for outcome, (color, marker) in OUTCOME_STYLES.items():
            points = [(t, ms) for t, _, o, ms in asked["timeline"] if o == outcome]
            if points:
                ax.scatter(*zip(*points), s=8, color=color, marker=marker, label=f"{outcome} ({len(points)})")
        ax.set_yscale("log")
        ax.set_ylabel("reply ms")
        ax.set_title(
            f"{store}: points lost {run['points_lost']}, unanswered {asked['unanswered']}, "
            f"error replies {asked['error_reply']}",
            fontsize=9,
            pad=28,
        )
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("seconds into the store's drill (shaded: store gone, recovering, re-embedding)")
    return save_figure(plt, fig, out)
