"""Stage 4: one flush → one memory write (cards, scenes, triggers, profile updates).

Two modes share the output schema:
- ``ExtractiveExtractor``: deterministic, no LLM. Sentence cards with the speaker as subject,
  normalised times, entity triggers; one scene per topic segment with an extractive summary.
- ``LlmExtractor``: one JSON-schema call per flush; one repair retry on invalid output, then the
  extractive mode for that flush (mode ``extractive_fallback``).
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

from memstream.ports import LLM
from memstream.processors.ids import point_id, stable_id
from memstream.processors.structured import StructuredCall, chat, clean_strings
from memstream.processors.text import Rule, first_match, keywords, names, sentences
from memstream.processors.timeparse import resolve_first
from memstream.processors.write import prompts
from memstream.processors.write.provenance import capped_provenance
from memstream.processors.write.statements import speakers_preference, states_preference
from memstream.schemas import (
    Card,
    CompressedTurn,
    FlushSegment,
    MemoryWrite,
    ProfileUpdate,
    Provenance,
    Scene,
    SourceTurn,
    StageCost,
    StmFlush,
    Turn,
)
from memstream.schemas.memory import CardType

log = logging.getLogger(__name__)

_PLAN = re.compile(
    r"\b(will|going to|gonna|plan(?:ning)? to|want to|hope to|next (?:week|month|year)|tomorrow)\b", re.I
)
_STATE = re.compile(r"\b(i am|i'm|we are|we're|feel|feeling|currently|these days|still)\b", re.I)
_EVENT = re.compile(
    r"\b(went|did|took|made|got|had|was|were|visited|started|finished|joined|bought|moved|met|saw|ran|painted)\b", re.I
)
_MIN_CARD_WORDS = 4
# A user's sentence's card type, the first that matches ("fact" when none does).
_CARD_TYPES: tuple[Rule[CardType], ...] = (
    (_PLAN.search, "plan"),
    (states_preference, "preference"),
    (_EVENT.search, "event"),
    (_STATE.search, "state"),
)


def card_sentences(text: str) -> list[str]:
    """The sentences of a turn that become cards (and profile items): those of four words or more,
    or the whole turn, so every turn stays reachable through at least one card."""
    return [s for s in sentences(text) if len(s.split()) >= _MIN_CARD_WORDS] or [text.strip()]


def classify(sentence: str, role: str) -> CardType:
    if role == "assistant":
        return "assistant_output"
    return first_match(sentence, _CARD_TYPES, "fact")


# What a source turn keeps of its turn as it is (beside its position and arrival).
_KEPT_OF_TURN = tuple(name for name in SourceTurn.model_fields if name in Turn.model_fields)


def source_turns(flush: StmFlush) -> list[SourceTurn]:
    out = []
    for i, ct in enumerate(flush.turns()):
        t = ct.turn
        # The segment stage numbers every turn; a flush from before it did (or a turn whose metadata
        # had no room) falls back to its place in the flush.
        seq = t.seq if t.seq is not None else i
        kept = {name: getattr(t, name) for name in _KEPT_OF_TURN}
        out.append(SourceTurn(**kept, seq=seq, received_at=ct.received_at))
    return out


def _card(
    flush: StmFlush,
    ct: CompressedTurn,
    content: str,
    *,
    scene_id: str,
    ctype: CardType,
    subject: str,
    event_time: datetime | None,
    phrase: str | None,
    entity: list[str],
    bridge: list[str],
    turn_ids: list[str],
    atomic: bool = True,
) -> Card:
    session_ids = sorted({ct.turn.session_id})
    return Card(
        card_id=point_id("card", flush.tenant_id, flush.conversation_id, turn_ids, content),
        subject=subject,
        type=ctype,
        content=content,
        event_time=event_time,
        time_phrase=phrase,
        provenance=Provenance(turn_ids=turn_ids, scene_id=scene_id, session_ids=session_ids),
        atomic=atomic,
        entity_triggers=entity,
        bridge_triggers=bridge,
        speaker=ct.turn.speaker,
        valid_from=ct.turn.event_time,
    )


def _scene_id(flush: StmFlush, segment: FlushSegment) -> str:
    return point_id(
        "scene", flush.tenant_id, flush.conversation_id, [t.turn.turn_id for t in segment.turns], segment.segment_id
    )


def _extractive_scene(flush: StmFlush, segment: FlushSegment) -> Scene:
    turns = segment.turns
    text = " ".join(t.turn.text for t in turns)
    summary_parts: list[str] = []
    for ct in turns:
        for s in sentences(ct.turn.text):
            if len(s.split()) >= _MIN_CARD_WORDS:
                summary_parts.append(f"{ct.turn.speaker}: {s}")
                break
        if len(summary_parts) >= 3:
            break
    return Scene(
        scene_id=_scene_id(flush, segment),
        topic_label=segment.topic_label,
        summary=" ".join(summary_parts) or f"{turns[0].turn.speaker}: {turns[0].turn.text[:200]}",
        participants=sorted({t.turn.speaker for t in turns}),
        start_time=min(t.turn.event_time for t in turns),
        end_time=max(t.turn.event_time for t in turns),
        turn_ids=[t.turn.turn_id for t in turns],
        scene_triggers=keywords(text, 6),
        horizon_triggers=[],
    )


class ExtractiveExtractor:
    """Deterministic extraction: the pipeline stays whole without an LLM."""

    mode = "extractive"

    def extract(self, flush: StmFlush, *, fallback_when_unavailable: bool = True) -> MemoryWrite:
        return self.write(flush, mode="extractive", costs=[])

    def write(self, flush: StmFlush, *, mode: str, costs: list[StageCost]) -> MemoryWrite:
        """The extractive write under a given mode label (``extractive_fallback`` after a failed LLM call)."""
        scenes: list[Scene] = []
        cards: list[Card] = []
        profiles: dict[str, ProfileUpdate] = {}
        for segment in flush.segments:
            scene = _extractive_scene(flush, segment)
            scenes.append(scene)
            for ct in segment.turns:
                cards.extend(self._turn_cards(flush, ct, scene.scene_id, profiles))
        return MemoryWrite(
            tenant_id=flush.tenant_id,
            conversation_id=flush.conversation_id,
            write_id=stable_id("write", flush.flush_id, mode),
            flush_id=flush.flush_id,
            mode=mode,  # type: ignore[arg-type]
            cards=cards,
            scenes=scenes,
            profile_updates=list(profiles.values()),
            source_turns=source_turns(flush),
            costs=costs,
            written_at=datetime.now(timezone.utc),
        )

    def _turn_cards(
        self, flush: StmFlush, ct: CompressedTurn, scene_id: str, profiles: dict[str, ProfileUpdate]
    ) -> list[Card]:
        turn = ct.turn
        speaker = turn.speaker
        chunks = card_sentences(turn.text)
        chunks += [f"shared an image: {c}" for c in turn.image_captions]
        out: list[Card] = []
        for sentence in chunks:
            mention = resolve_first(sentence, turn.event_time)
            ctype = classify(sentence, turn.role)
            entity = [n for n in names(sentence) if n != speaker]
            content = f"{speaker}: {sentence}"
            out.append(
                _card(
                    flush,
                    ct,
                    content,
                    scene_id=scene_id,
                    ctype=ctype,
                    subject=speaker,
                    event_time=mention.start if mention else turn.event_time,
                    phrase=mention.phrase if mention else None,
                    entity=[speaker, *entity],
                    bridge=[],
                    turn_ids=[turn.turn_id],
                )
            )
            if turn.role != "assistant" and speakers_preference(sentence):  # the speaker's own taste only
                profiles.setdefault(speaker, ProfileUpdate(speaker=speaker))
                profiles[speaker].preferences.append(sentence)
                profiles[speaker].source_turn_ids.append(turn.turn_id)
        return out


# --- LLM mode -----------------------------------------------------------------------------------


class _LlmCard(BaseModel):
    model_config = ConfigDict(extra="ignore")
    subject: str = Field(min_length=1)
    type: CardType
    content: str = Field(min_length=3)
    time_phrase: str | None = None
    turn_ids: list[str] = Field(min_length=1)
    atomic: bool = True
    entity_triggers: list[str] = Field(default_factory=list)
    bridge_triggers: list[str] = Field(default_factory=list)


class _LlmScene(BaseModel):
    model_config = ConfigDict(extra="ignore")
    topic: str = ""
    summary: str = Field(min_length=3)
    participants: list[str] = Field(default_factory=list)
    scene_triggers: list[str] = Field(default_factory=list)
    horizon_triggers: list[str] = Field(default_factory=list)


class _LlmProfile(BaseModel):
    model_config = ConfigDict(extra="ignore")
    speaker: str
    traits: list[str] = Field(default_factory=list)
    preferences: list[str] = Field(default_factory=list)
    relationships: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)


class _LlmOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    scenes: list[_LlmScene] = Field(default_factory=list)  # a topic without one gets the extractive scene
    cards: list[_LlmCard] = Field(min_length=1)
    profiles: list[_LlmProfile] = Field(default_factory=list)


class ExtractionInvalid(ValueError):
    pass


_EXTRACT = StructuredCall("extract", "memory_extraction", _LlmOutput, ExtractionInvalid, echo_chars=4000)


class LlmUnavailable(RuntimeError):
    """The LLM could not be reached (timeout, connection, rate limit, server error): the flush is
    worth extracting again later rather than falling back to the extractive mode for good."""


class LlmExtractor:
    """One structured LLM call per flush; falls back to the extractive mode on invalid output."""

    mode = "llm"

    def __init__(
        self,
        llm: LLM,
        *,
        max_tokens: int = 1024,
        max_cards: int = 24,
        max_card_turns: int = 4,
        fallback: ExtractiveExtractor | None = None,
        stable_schema: bool = True,
    ):
        self.llm = llm
        self.stable_schema = stable_schema  # the same schema every call (prompt caches); else enums of the flush's ids
        self.max_tokens = max_tokens
        self.max_cards = max_cards
        self.max_card_turns = max_card_turns
        self.fallback = fallback or ExtractiveExtractor()
        self.repairs = 0
        self.fallbacks = 0

    def extract(self, flush: StmFlush, *, fallback_when_unavailable: bool = True) -> MemoryWrite:
        """The flush's memory write. Unusable output falls back to the extractive mode; so does an
        unreachable LLM, unless ``fallback_when_unavailable`` is False: then LlmUnavailable is raised
        and the caller may try again once the LLM is back."""
        user = prompts.extract_user([(seg.topic_label, seg.turns) for seg in flush.segments])
        turn_ids = None if self.stable_schema else [t.turn.turn_id for t in flush.turns()]
        attempt = _EXTRACT.ask(
            self.llm,
            chat(prompts.EXTRACT_SYSTEM, user),
            prompts.extract_schema(turn_ids, len(flush.segments), max_cards=self.max_cards),
            max_tokens=self.max_tokens,
            read=lambda result: self._write(flush, _EXTRACT.parse(result)),
        )
        self.repairs += attempt.repaired
        if attempt.value is not None:
            return attempt.value.model_copy(update={"costs": [attempt.cost]})
        if attempt.llm_error is not None and attempt.llm_error.retryable and not fallback_when_unavailable:
            raise LlmUnavailable(str(attempt.llm_error)) from attempt.llm_error
        self.fallbacks += 1
        log.warning("extraction fell back to extractive mode for flush %s: %s", flush.flush_id, attempt.error)
        return self.fallback.write(flush, mode="extractive_fallback", costs=[attempt.cost])

    def _write(self, flush: StmFlush, out: _LlmOutput) -> MemoryWrite:
        turns = flush.turns()
        by_id = {t.turn.turn_id: t for t in turns}
        # One scene per topic segment: the LLM's where it wrote one, else the extractive scene.
        by_topic = {s.topic.strip().upper(): s for s in out.scenes}
        if len(flush.segments) == 1 and prompts.topic_key(0) not in by_topic and out.scenes:
            by_topic[prompts.topic_key(0)] = out.scenes[0]
        scenes: list[Scene] = []
        scene_of_turn: dict[str, str] = {}
        for i, segment in enumerate(flush.segments):
            llm_scene = by_topic.get(prompts.topic_key(i))
            scene = _extractive_scene(flush, segment)
            if llm_scene is not None:
                seg_turns = segment.turns
                scene = scene.model_copy(
                    update={
                        "summary": llm_scene.summary.strip(),
                        "participants": sorted(
                            {t.turn.speaker for t in seg_turns} | set(clean_strings(llm_scene.participants, 12))
                        ),
                        "scene_triggers": clean_strings(llm_scene.scene_triggers, 12),
                        "horizon_triggers": clean_strings(llm_scene.horizon_triggers, 12),
                    }
                )
            scenes.append(scene)
            scene_of_turn.update({t.turn.turn_id: scene.scene_id for t in segment.turns})
        cards: list[Card] = []
        for c in out.cards:
            cited = [tid for tid in dict.fromkeys(c.turn_ids) if tid in by_id]
            if not cited:
                continue  # provenance must point at real source turns
            # A card rests on a few turns: citing half the flush would show a reader turns that say nothing of it.
            turn_ids = capped_provenance(c.content, [(t, by_id[t].turn.text) for t in cited], self.max_card_turns)
            anchor = by_id[turn_ids[0]]
            mention = resolve_first(c.time_phrase or c.content, anchor.turn.event_time)
            # The subject is a precise name, so it is always an entity trigger (as in the extractive mode).
            cards.append(
                _card(
                    flush,
                    anchor,
                    c.content.strip(),
                    scene_id=scene_of_turn[turn_ids[0]],
                    ctype=c.type,
                    subject=c.subject.strip(),
                    event_time=mention.start if mention else anchor.turn.event_time,
                    phrase=mention.phrase if mention else c.time_phrase,
                    entity=clean_strings([c.subject, *c.entity_triggers], 12),
                    bridge=clean_strings(c.bridge_triggers, 12),
                    turn_ids=turn_ids,
                    atomic=c.atomic,
                )
            )
        if not cards:
            raise ExtractionInvalid(f"no card cites a turn id of this flush; valid ids: {', '.join(by_id)}")
        profiles = [
            ProfileUpdate(
                speaker=p.speaker,
                traits=clean_strings(p.traits, 12),
                preferences=clean_strings(p.preferences, 12),
                relationships=clean_strings(p.relationships, 12),
                constraints=clean_strings(p.constraints, 12),
            )
            for p in out.profiles
            if p.speaker in {t.turn.speaker for t in turns}
        ]
        return MemoryWrite(
            tenant_id=flush.tenant_id,
            conversation_id=flush.conversation_id,
            write_id=stable_id("write", flush.flush_id, "llm"),
            flush_id=flush.flush_id,
            mode="llm",
            cards=cards,
            scenes=scenes,
            profile_updates=profiles,
            source_turns=source_turns(flush),
            costs=[],  # the caller adds what the calls cost
            written_at=datetime.now(timezone.utc),
        )
