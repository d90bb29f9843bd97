"""Phase 3 of an end-to-end run (``bench.e2e``): with the worker stopped, the same-run baselines
rank the raw turns, whole and cut into the extractive cards' sentences (one sentence per turn kept),
dense, BM25 and fused (RRF), and keep what comes closest to each question's memstream evidence
tokens; the full context is counted. The rankings serve the in-process benches too (``bench.ablate``)."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from memstream.bench.cases import TENANT, BenchQuestion, BenchSet, answer_score, full_context, ranked_scores, score
from memstream.bench.deployment import Deployment
from memstream.bench.e2e_state import SENTENCE_STORE, E2EOptions
from memstream.bench.report import budget_key
from memstream.bench.scoring import fill_k, one_per_turn, rrf_fuse, take_nearest_budget
from memstream.config import Settings
from memstream.ports import Embedder, StoreFilter, StoreHit, VectorStore
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import CARDS, TURNS
from memstream.streams import runtime


class Evaluation:
    """Every question's baselines at memstream's tokens for it, over the run's raw turns."""

    def __init__(self, bench: BenchSet, options: E2EOptions, out: Path, *, status: Callable[[str], None]):
        self.bench, self.options, self.out, self.status = bench, options, out, status

    def run(self, deployment: Deployment, records: dict[str, dict[str, Any]]) -> dict[str, Any]:
        from memstream.adapters.st_embedder import SentenceTransformerEmbedder

        settings = deployment.settings
        runtime.apply_torch_threads(settings)
        embedder = SentenceTransformerEmbedder.from_settings(settings)
        full_texts = {cid: full_context(turns) for cid, turns in self.bench.conversations.items()}
        full_tokens = {cid: count_tokens(text) for cid, text in full_texts.items()}
        top = max(
            [*self.options.sweep_k, *map(fill_k, self.options.sweep_tokens), settings.evidence_k, self.options.k or 0]
        )
        limits = Limits.for_k(top)
        ranked = self.bench.name == "longmemeval"
        with contextlib.ExitStack() as opened:
            store = opened.enter_context(deployment.store())
            if self.bench.baseline_index == "own":
                self.status("indexing the raw turns for the baselines")
                whole = opened.enter_context(contextlib.closing(self._own_baseline(embedder)))
            else:
                whole = store
            sentences = opened.enter_context(contextlib.closing(self._sentence_baseline(embedder)))
            self.status("ranking raw turns and their sentences for the baselines")
            rows: dict[str, dict[str, Any]] = {}
            for q in self.bench.questions:
                record = records[q.qid]
                budgets = {
                    "main": record["context_tokens"],
                    **{k: s["context_tokens"] for k, s in record["sweep"].items()},
                    **{budget_key(b): s["context_tokens"] for b, s in record.get("budgets", {}).items()},
                }
                rankings = baseline_rankings(q, whole, sentences, embedder.embed([q.text])[0], limits)
                rows[q.qid] = {
                    "full_context_tokens": full_tokens[q.conversation_id],
                    "full_context_scores": answer_score(q, [full_texts[q.conversation_id]]),
                    **baseline_rows(q, rankings, budgets, ranked=ranked),
                }
            cards = store.count(CARDS, TENANT)
        return {
            "baselines": rows,
            "cards": cards,
            "embedding_model": embedder_name(settings),
            "baseline_limits": asdict(limits),
        }

    def _own_baseline(self, embedder: Embedder) -> VectorStore:
        """The raw turns as a plain RAG system indexes them (``speaker: text`` and the image captions),
        kept in ``<out>/baseline``."""
        from memstream.bench.retrieval import baseline_store

        return baseline_store(
            self.out / "baseline", [t for ts in self.bench.conversations.values() for t in ts], embedder
        )

    def _sentence_baseline(self, embedder: Embedder) -> VectorStore:
        """The raw turns' sentences (and image captions), kept in ``<out>/baseline-sentences``: built
        once, a conversation at a time, so an interrupted run resumes it."""
        from memstream.bench.retrieval import sentence_baseline_store

        conversations = len(self.bench.conversations)

        def progress(done: int, total: int) -> None:
            if done < total:
                self.status(f"indexing the sentences of the raw turns: conversation {done + 1} of {conversations}")

        return sentence_baseline_store(
            self.out / SENTENCE_STORE,
            [t for ts in self.bench.conversations.values() for t in ts],
            embedder,
            progress=progress,
        )


def embedder_name(settings: Settings) -> str:
    return settings.embedding_model or "all-MiniLM-L6-v2 (packaged)"


@dataclass(frozen=True)
class Limits:
    """How many hits each baseline search asks for: enough ranked units to fill the largest budget
    after one chunk per turn is kept (sentences are short, and several may come from one turn)."""

    whole: int
    sentences: int

    @classmethod
    def for_k(cls, top: int) -> Limits:
        """Enough hits for the largest K (or filled budget's K) a run asks."""
        return cls(whole=max(50, 4 * top), sentences=max(200, 10 * top))


@dataclass(frozen=True)
class Unit:
    """One ranked unit of a baseline: a whole raw turn, or one sentence (or image caption) of one."""

    key: str  # the store point: what fusion ranks
    turn_id: str
    text: str  # what the reader would get, and what its tokens count


def hit_unit(hit: StoreHit) -> Unit:
    """A search hit as a unit; points of the pipeline's own turn store carry no ``chunk_text``."""
    p = hit.payload
    return Unit(hit.id, p["turn_id"], p.get("chunk_text") or f"{p['speaker']}: {p['text']}")


def fuse(dense: Sequence[Unit], sparse: Sequence[Unit]) -> list[Unit]:
    """Hybrid ranking: reciprocal rank fusion (k = 60) of the dense and BM25 rankings of the same units."""
    units = {u.key: u for u in (*dense, *sparse)}
    return [units[key] for key in rrf_fuse([[u.key for u in dense], [u.key for u in sparse]])]


def rankings_of(dense: Sequence[Unit], sparse: Sequence[Unit], suffix: str) -> dict[str, list[Unit]]:
    """Dense, BM25 and their fusion, each with one unit per turn (its best-ranked chunk)."""

    def turn_of(u: Unit) -> str:
        return u.turn_id

    return {
        f"dense_{suffix}": one_per_turn(dense, turn_of),
        f"bm25_{suffix}": one_per_turn(sparse, turn_of),
        f"rrf_{suffix}": one_per_turn(fuse(dense, sparse), turn_of),
    }


def baseline_rankings(
    q: BenchQuestion, whole: VectorStore, sentences: VectorStore, vector: Any, limits: Limits
) -> dict[str, list[Unit]]:
    """Every baseline's ranking of the question's conversation: whole raw turns (``*_topk``) and
    the sentences of raw turns (``*_sentences``), dense (same embedder as memstream), BM25 and RRF."""
    scope = StoreFilter(equals={"conversation_id": q.conversation_id})
    out: dict[str, list[Unit]] = {}
    for store, limit, suffix in ((whole, limits.whole, "topk"), (sentences, limits.sentences, "sentences")):
        dense = [hit_unit(h) for h in store.search(TURNS, TENANT, vector, where=scope, limit=limit)]
        sparse = [hit_unit(h) for h in store.search_text(TURNS, TENANT, q.text, where=scope, limit=limit)]
        out |= rankings_of(dense, sparse, suffix)
    return out


def take_units(ranking: Sequence[Unit], budget: int) -> tuple[list[Unit], int]:
    """A baseline's first units whose tokens come closest to ``budget`` (at least one), and their tokens."""
    texts = [u.text for u in ranking]
    keep = take_nearest_budget(texts, budget, count_tokens) if texts else 0
    return list(ranking[:keep]), sum(count_tokens(t) for t in texts[:keep])


def baseline_rows(
    q: BenchQuestion, rankings: dict[str, list[Unit]], budgets: dict[str, int], *, ranked: bool
) -> dict[str, dict[str, Any]]:
    """Every baseline at each budget (memstream's tokens for the question at the main K and each
    swept K): turn recall and answer-bearing recall of the units taken; with ``ranked`` (LongMemEval)
    also LongMemEval's own metrics of the first K ranked units at each swept K."""
    out: dict[str, dict[str, Any]] = {}
    for name, ranking in rankings.items():
        for key, budget in budgets.items():
            chosen, tokens = take_units(ranking, max(int(budget), 1))
            entry: dict[str, Any] = {
                "context_tokens": tokens,
                "scores": {**score(q, [u.turn_id for u in chosen]), **answer_score(q, [u.text for u in chosen])},
            }
            if ranked and key.isdigit():  # a swept K
                entry["ranked_scores"] = ranked_scores(q, [u.turn_id for u in ranking], int(key), cited=False)
            out.setdefault(name, {})[key] = entry
    return out
