"""The content query: the question with the speakers it names made "someone" (card texts carry
"Speaker: ", so a short card of the named speaker otherwise outranks the card that answers). Its
speakers are the pool's; the ones each conversation's pools have shown are remembered, so that the
content query can usually be embedded with the question, in one pass."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from memstream.ports import Embedder
from memstream.processors.query.retrieve import Pool, Retriever, Scope, pool_speakers, speakers_named
from memstream.processors.text import without_names
from memstream.schemas import Query

SPEAKER_MEMORY = 4096  # conversations whose speakers are remembered


@dataclass(frozen=True)
class ContentQuery:
    """The question with the speakers it names (``names``) made "someone", and its vector."""

    names: tuple[str, ...]
    text: str
    vector: np.ndarray | None = None


class ContentQueries:
    """Content queries for one engine's questions; ``RetrievalParams.content_query`` says how they count."""

    def __init__(self, retriever: Retriever, embedder: Embedder):
        self.retriever = retriever
        self.embedder = embedder
        # Conversation → the speakers its pools have shown (most recent last, bounded).
        self._speakers: OrderedDict[tuple[str, str], frozenset[str]] = OrderedDict()
        self._speakers_lock = threading.Lock()  # questions are answered in several threads at once

    def guess(self, query: Query) -> ContentQuery | None:
        """The content query from the speakers this conversation's earlier pools showed (None when
        off, or when the question names none of them): embedded with the question, in one pass."""
        if self.retriever.params.content_query == "none":
            return None
        known = self._speakers.get((query.tenant_id, query.conversation_id), frozenset())
        named = speakers_named(query.question, known)
        return ContentQuery(tuple(named), without_names(query.question, named)) if named else None

    def search(
        self, pool: Pool, scope: Scope, question: str, vectors: np.ndarray, k: int, guess: ContentQuery | None
    ) -> np.ndarray:
        """Search with the question's content (its speakers' names made "someone"); returns the query
        vectors the rerank uses from here on (with "semantic", the content query's instead of the
        question's). The speakers are the pool's; the guess's vector serves when it named the same."""
        mode = self.retriever.params.content_query
        speakers = self._remember_speakers(scope, pool_speakers(pool))
        named = tuple(speakers_named(question, speakers))
        if not named:
            return vectors
        if guess is not None and guess.names == named and guess.vector is not None:
            content = guess.vector[None, :]
        else:
            content = np.asarray(self.embedder.embed([without_names(question, named)]), dtype=np.float32)
        if mode in ("vote", "both"):
            self.retriever.content(pool, scope, content[0], k=k)
        if mode in ("semantic", "both"):
            return np.vstack([content, vectors[1:]])
        return vectors

    def _remember_speakers(self, scope: Scope, seen: frozenset[str]) -> frozenset[str]:
        key = (scope.tenant_id, scope.conversation_id)
        with self._speakers_lock:
            speakers = self._speakers.pop(key, frozenset()) | seen
            self._speakers[key] = speakers
            while len(self._speakers) > SPEAKER_MEMORY:
                self._speakers.popitem(last=False)
        return speakers


__all__ = ["ContentQueries", "ContentQuery", "SPEAKER_MEMORY"]
