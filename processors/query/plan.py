"""Stage 7a: the query plan — which entities, whose words, which period, which operation, and how
to access memory (Lookup, Compose, Replay).

Two planners return the same ``Plan``:
- ``rule_plan`` / ``RulePlanner``: patterns only, no LLM.
- ``LlmPlanner``: one JSON-schema call; one repair retry on invalid output, then the rule planner.
  The model copies time phrases; code resolves them against the question's date (models are bad at
  date arithmetic), and code derives the access profile from the two booleans.
- ``HybridPlanner``: the rules first; the LLM planner only for a question the rules doubt
  (``rule_doubts``: a decision they took by default where the question shows they may be wrong),
  and only the doubted fields are taken from its plan.
"""

from __future__ import annotations

import calendar
import logging
import re
from datetime import datetime, timedelta, timezone
from typing import Iterable, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field

from memstream.ports import LLM
from memstream.processors.query import prompts
from memstream.processors.structured import StructuredCall, chat, clean_strings
from memstream.processors.text import PRONOUNS, STOPWORDS, Rule, first_match, names
from memstream.processors.timeparse import MONTHS, WEEKDAYS, TimeMention, find_time_mentions
from memstream.schemas import Plan, StageCost
from memstream.schemas.query import AccessProfile, Operation

log = logging.getLogger(__name__)

Participants = Literal["user", "assistant", "both", "ambiguous"]
Range = tuple[datetime | None, datetime | None]

MAX_REWRITES = 2
MAX_ENTITIES = 8

_FIDELITY = re.compile(
    r"\b(exact(ly)?|word[- ]for[- ]word|verbatim|quote|wording|what did (i|you) (say|write)|code|snippet)\b", re.I
)
_DISTRIBUTED = re.compile(
    r"\b(how many|all|every|list|both|each|compare|in total|times|which .* and|(kinds?|types?|sorts?) of)\b", re.I
)
# "What video games does Nate play?", "Which cities has John been to?", "What are ...": a set is asked
# for, and its members usually come from several places in the conversation.
_PLURAL_OBJECT = re.compile(
    r"^\W*(what|which)\s+((\w+\s+){0,2}?\w{2,}[^s\W]s\s+(has|have|does|do|did|are|were)|(are|were)\s)\b", re.I
)
_AGGREGATE = re.compile(r"\b(how many|in total|count|all)\b", re.I)
_TEMPORAL = re.compile(r"\b(when|what (date|day|year|month)|how long|before|after|first|last)\b", re.I)
_COMPARE = re.compile(r"\b(compare|more than|less than|better|worse|difference)\b", re.I)
_SORT = re.compile(r"\b(order|earliest|latest|sort|rank)\b", re.I)
# In order: the first operation whose pattern matches is the rule plan's.
_OPERATIONS: tuple[Rule[Operation], ...] = (
    (_AGGREGATE.search, "aggregate"),
    (_COMPARE.search, "compare"),
    (_SORT.search, "sort"),
    (_TEMPORAL.search, "temporal_select"),
)
# The time itself is what is asked: a range filter would hide the answer.
_ASKS_TIME = re.compile(
    r"^\W*when\b|\bwhen (did|do|does|was|were|is|are|will|would|had|has|have)\b"
    r"|\b(what|which) (date|day|year|month|time|week)\b|\bhow long ago\b",
    re.I,
)

_BOTH = re.compile(r"\b([Ww]e|us|[Oo]urs?|[Oo]urselves|[Yy]ou and (I|me)|I and you|[Mm]e and you)\b")
_YOU = re.compile(r"\b(you|your|yours)\b", re.I)
_ME = re.compile(r"\b(i|my|me|mine)\b", re.I)
# "…the trail you recommended", "what did you tell me": the answer is in the assistant's own words,
# however much of the question is about the user. Past tense only: "can you recommend…" asks for
# new advice about the user.
_SAID_BY_YOU = re.compile(
    r"\byou(?:\s+had|\s+have|'d|'ve)?\s+(?:\w+ly\s+)?(recommended|suggested|told|said|mentioned|provided"
    r"|gave|given|shared|listed|explained|advised|offered|proposed|wrote|written|named|came up with)\b"
    r"|\bdid\s+you\s+(?:\w+ly\s+)?(recommend|suggest|tell|say|mention|provide|give|share|list|explain|advise"
    r"|offer|propose|write|name|come up with)\b",
    re.I,
)
# Whose words the question is about, the first that matches.
_PARTICIPANTS: tuple[Rule[Participants], ...] = (
    (_BOTH.search, "both"),
    (_SAID_BY_YOU.search, "assistant"),
    (_ME.search, "user"),
    (_YOU.search, "assistant"),
)

# Sentence-initial verbs that names() would take for a proper name ("Tell", "Compare Melanie").
_LEADING = frozenset(
    """tell list name quote compare describe give show remind summarize summarise
    please recall find explain count rank sort order repeat write say whose""".split()
)
_NOT_A_NAME = _LEADING | STOPWORDS
_WEEKDAY_NAMES = frozenset(w.capitalize() for w in WEEKDAYS)

# "in May" / "last May": timeparse needs a year; a question's month without one is the latest such
# month up to the question date. A preposition is required so that "May" the person stays a name.
_MONTH_ONLY = re.compile(
    rf"\b(last|this|in|during|since|before|after|until|till|by)\s+({'|'.join(MONTHS)})\b(?!\.?,?\s*\d)", re.I
)
# "in March and April", "during May, June or July": the months listed after the first one (same year
# rule); not after a one-sided qualifier ("since March and April" is left as "since March").
_MONTH_TAIL = re.compile(
    rf"(?:\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|&|to|through)\s+)({'|'.join(MONTHS)})\b(?!\.?,?\s*\d)", re.I
)
_LISTS_MONTHS = frozenset({"last", "this", "in", "during"})
# timeparse reads a bare year only after "in/since/during/of"; "before 2024" needs this.
_YEAR_QUALIFIED = re.compile(r"\b(before|after|until|till|by)\s+((?:19|20)\d{2})\b", re.I)
_QUALIFIERS = frozenset({"since", "after", "before", "until", "till", "by"})
_QUALIFIER_BEFORE = re.compile(r"\b(since|after|before|until|till|by)\s+$", re.I)


# --- time ranges --------------------------------------------------------------------------------


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def _period_end(start: datetime, granularity: str) -> datetime:
    """Last instant of the period (inclusive, like the stores' range filter)."""
    if granularity == "day":
        end = start + timedelta(days=1)
    elif granularity == "weekend":
        end = start + timedelta(days=2)
    elif granularity == "week":
        end = start + timedelta(days=7)
    elif granularity == "month":
        end = start.replace(day=1) + timedelta(days=calendar.monthrange(start.year, start.month)[1])
    else:
        end = start.replace(year=start.year + 1, month=1, day=1)
    return end - timedelta(microseconds=1)


def _month_only(m: re.Match[str], now: datetime) -> datetime:
    return _month_start(m.group(1).lower(), m.group(2), now)


def _month_start(rel: str, name: str, now: datetime) -> datetime:
    month = MONTHS.index(name.lower()) + 1
    year = now.year
    if rel == "this":
        pass
    elif rel == "last":
        year -= 1 if month >= now.month else 0
    elif month > now.month:
        year -= 1
    return datetime(year, month, 1, tzinfo=timezone.utc)


def _spans(text: str, now: datetime) -> list[tuple[int, int, datetime, datetime, str | None]]:
    """Time mentions as (start index, end index, first instant, last instant, qualifier)."""
    found: list[tuple[int, int, datetime, datetime, str | None]] = []
    pos = 0
    for mention in find_time_mentions(text, now):
        i = text.find(mention.phrase, pos)
        if i < 0:
            continue
        pos = i + len(mention.phrase)
        found.append(_qualified(text, i, pos, mention))
    for m in _MONTH_ONLY.finditer(text):
        if any(m.start() < e and s < m.end() for s, e, *_ in found):
            continue
        start = _month_only(m, now)
        found.append(_qualified(text, m.start(), m.end(), TimeMention(m.group(0), start, "month")))
        end, rel = m.end(), m.group(1).lower()
        while rel in _LISTS_MONTHS and (tail := _MONTH_TAIL.match(text, end)):
            start = _month_start(rel, tail.group(1), now)
            found.append((tail.start(1), tail.end(), start, _period_end(start, "month"), None))
            end = tail.end()
    for m in _YEAR_QUALIFIED.finditer(text):
        if any(m.start() < e and s < m.end() for s, e, *_ in found):
            continue
        start = datetime(int(m.group(2)), 1, 1, tzinfo=timezone.utc)
        found.append(_qualified(text, m.start(), m.end(), TimeMention(m.group(0), start, "year")))
    return sorted(found, key=lambda f: f[0])


def _qualified(text: str, i: int, j: int, mention: TimeMention) -> tuple[int, int, datetime, datetime, str | None]:
    first = mention.phrase.split()[0].lower()
    qualifier = first if first in _QUALIFIERS else None
    before = _QUALIFIER_BEFORE.search(text[:i])
    if qualifier is None and before:
        qualifier, i = before.group(1).lower(), before.start()
    return i, j, mention.start, _period_end(mention.start, mention.granularity), qualifier


def _combine(spans: list[tuple[int, int, datetime, datetime, str | None]]) -> Range:
    """Plain periods span their hull; "since/after/before/until X" bound it on one side."""
    plain = [(lo, hi) for _, _, lo, hi, q in spans if q is None]
    lo: datetime | None = min(p[0] for p in plain) if plain else None
    hi: datetime | None = max(p[1] for p in plain) if plain else None
    for _, _, start, end, q in spans:
        if q in ("since", "after"):
            bound = start if q == "since" else end + timedelta(microseconds=1)
            lo = bound if lo is None else max(lo, bound)
        elif q in ("before", "until", "till", "by"):
            bound = start - timedelta(microseconds=1) if q == "before" else end
            hi = bound if hi is None else min(hi, bound)
    if lo is not None and hi is not None and lo > hi:
        return None, None  # contradictory bounds: better no filter than an empty one
    return lo, hi


def time_range(text: str, now: datetime) -> Range:
    """The absolute period that ``text`` names, resolved against ``now``; (None, None) if none.
    Both ends are inclusive; an open end is None ("since 2022" has no end)."""
    return _combine(_spans(text, _utc(now)))


_ISO = re.compile(r"^\s*(\d{4})(?:-(\d{1,2}))?(?:-(\d{1,2}))?\s*$")


def _iso_period(text: str) -> Range | None:
    """None when ``text`` is not ISO-shaped; (None, None) when it is but names no real date."""
    m = _ISO.match(text)
    if not m:
        return None
    year, month, day = int(m.group(1)), m.group(2), m.group(3)
    try:
        if day:
            start, g = datetime(year, int(month), int(day), tzinfo=timezone.utc), "day"
        elif month:
            start, g = datetime(year, int(month), 1, tzinfo=timezone.utc), "month"
        else:
            start, g = datetime(year, 1, 1, tzinfo=timezone.utc), "year"
        return start, _period_end(start, g)
    except (ValueError, OverflowError):  # month 13, year 9999's end
        return None, None


def resolve_time(value: str, now: datetime) -> Range:
    """The planner model's ``time``: an ISO date/month/year, an ISO interval ("A/B", "A to B"), or a
    phrase resolved against ``now``. Anything unresolvable means no range, never an error."""
    value = value.strip()
    if not value:
        return None, None
    iso = _iso_period(value)
    if iso is not None:
        return iso
    parts = re.split(r"\s*(?:/|\.\.|\bto\b)\s*", value)
    if len(parts) == 2:
        a, b = _iso_period(parts[0]), _iso_period(parts[1])
        if a is not None and b is not None and a[0] is not None and b[1] is not None and a[0] <= b[1]:
            return a[0], b[1]
    found = time_range(value, now)
    if found == (None, None) and not re.match(r"(?i)(in|last|this)\b", value):
        found = time_range(f"in {value}", now)  # a bare "May" or "2022" copied without its preposition
    return found


# --- rule planner -------------------------------------------------------------------------------


def choose_profile(*, fidelity: bool, distributed: bool) -> AccessProfile:
    """Replay if fidelity-sensitive, else Compose if the evidence is distributed, else Lookup."""
    if fidelity:
        return "replay"
    return "compose" if distributed else "lookup"


def _mask(text: str, spans: list[tuple[int, int, datetime, datetime, str | None]]) -> str:
    """Blank out time phrases so "last week" is neither a temporal operation nor an entity."""
    chars = list(text)
    for i, j, *_ in spans:
        chars[i:j] = " " * (j - i)
    return "".join(chars)


def _entities(masked: str) -> list[str]:
    out: list[str] = []
    for span in names(masked):
        words = span.split()
        while words and words[0].lower() in _NOT_A_NAME:
            words = words[1:]
        entity = " ".join(words)
        if entity and entity not in _WEEKDAY_NAMES and entity not in out:
            out.append(entity)
    return out[:MAX_ENTITIES]


_AUX_SINGULAR = {"do": "does", "have": "has", "are": "is", "were": "was"}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().rstrip("?.! ").casefold())


def _same(a: str, b: str) -> bool:
    return _norm(a) == _norm(b)


def _substitute(question: str, start: int, end: int, item: str, singular: bool) -> str:
    text = question[:start] + item + question[end:]
    text = re.sub(r"\s*\b(both|each)\b(\s+of\b)?", "", text, flags=re.I)
    if singular:
        # "What do Melanie and Caroline like?" -> "What does Melanie like?"
        def agree(m: re.Match[str]) -> str:
            word = _AUX_SINGULAR[m.group(1).lower()]
            return (word.capitalize() if m.group(1)[0].isupper() else word) + m.group(2)

        text = re.sub(
            rf"\b(do|have|are|were)(\s+){re.escape(item)}", lambda m: agree(m) + item, text, count=1, flags=re.I
        )
    text = re.sub(r"\s+([?.!,])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()
    return text[0].upper() + text[1:] if text else text


def split_rewrites(question: str, entities: list[str]) -> list[str]:
    """Up to two answer-free sub-questions when the question has an obvious "X and Y" split; built
    only from the question's own words, so they cannot carry a guessed answer."""
    if re.search(r"\b(together|each other|one another)\b", question, re.I):
        return []  # one shared event: splitting it would look for two half-events
    pairs: list[tuple[re.Match[str], bool]] = []
    for a in entities:
        for b in entities:
            if a != b:
                m = re.search(rf"(?<![,\w])(?<!, )({re.escape(a)})('s)?\s+and\s+({re.escape(b)})('s)?\b", question)
                if m:
                    pairs.append((m, True))
    if not pairs:
        for m in re.finditer(r"(?<![,\w])(?<!, )([a-z][a-z'\-]+)()\s+and\s+([a-z][a-z'\-]+)()\b", question):
            if not {m.group(1), m.group(3)} & (STOPWORDS | PRONOUNS):
                pairs.append((m, False))
    if not pairs:
        return []
    m, proper = min(pairs, key=lambda p: p[0].start())
    owner = "'s" if (m.group(2) or m.group(4)) else ""
    out: list[str] = []
    for item in (m.group(1) + owner, m.group(3) + owner):
        rewrite = _substitute(question, m.start(), m.end(), item, singular=proper and not owner)
        if rewrite and not _same(rewrite, question) and rewrite not in out:
            out.append(rewrite)
    return out[:MAX_REWRITES]


_PAST = re.compile(
    r"\b(used to|did\b.*\buse to|before|previously|formerly|earlier|at first|originally|no longer|anymore|"
    r"in the past|back then|(where|what|who) (did|was|were) .* (live|work|have|like|prefer)\b)",
    re.I,
)


def about_the_past(question: str, time_from: datetime | None, time_to: datetime | None) -> bool:
    """Superseded versions are evidence too when the question names a period or asks how things were."""
    return time_from is not None or time_to is not None or bool(_PAST.search(question))


def rule_plan(question: str, now: datetime) -> Plan:
    """The planner without an LLM: the same fields from patterns."""
    now = _utc(now)
    spans = _spans(question, now)
    masked = _mask(question, spans)
    fidelity = bool(_FIDELITY.search(question))
    distributed = bool(_DISTRIBUTED.search(masked) or _PLURAL_OBJECT.search(masked))
    operation = first_match(masked, _OPERATIONS, "lookup")
    time_from, time_to = (None, None) if _ASKS_TIME.search(question) else _combine(spans)
    entities = _entities(masked)
    return Plan(
        planner="rules",
        entities=entities,
        participants=first_match(question, _PARTICIPANTS, "ambiguous"),
        time_from=time_from,
        time_to=time_to,
        operation=operation,
        distributed=distributed,
        fidelity=fidelity,
        rewrites=split_rewrites(question, entities) if distributed else [],
        history=about_the_past(question, time_from, time_to),
        profile=choose_profile(fidelity=fidelity, distributed=distributed),
    )


# --- how sure the rules are ---------------------------------------------------------------------
#
# Every field of a rule plan is either matched by a pattern or a default. Most defaults are right
# (no time phrase: no period; no aggregate word: a lookup). A doubt is a default, or a pick between
# patterns, where the question itself shows the rules may be wrong; each names the plan fields it
# puts in doubt, and the hybrid planner asks the LLM for those fields only.

Doubt = Literal["time_unresolved", "time_several", "operation_conflict", "no_subject", "unsplit_coordination"]
DOUBTS: tuple[Doubt, ...] = get_args(Doubt)
DOUBTED_FIELDS: dict[Doubt, tuple[str, ...]] = {
    "time_unresolved": ("time",),
    "time_several": ("time",),
    "operation_conflict": ("operation",),
    "no_subject": ("entities", "participants"),
    "unsplit_coordination": ("distributed",),
}

# Words that name a period or a point in time. One of them with no period resolved means the
# question names a period the rules could not read ("summer 2021", "recently", "the month of
# February"). Month and weekday names count capitalised only ("may" is a verb); a year glued to a
# prefix ("pre-1920") is an attribute, not a period.
_TIME_CUE = re.compile(
    r"\b(ago|yesterday|today|tonight|tomorrow|recent(ly)?|lately|weekends?|summer|winter|spring|autumn"
    r"|(last|past|previous|this|next|coming)\s+(week|month|year|night|season)s?|\d+\s+(day|week|month|year)s?"
    rf"|(?-i:{'|'.join(w.capitalize() for w in (*WEEKDAYS, *MONTHS))}))\b"
    r"|(?<![\w-])(19|20)\d{2}\b",
    re.I,
)
# What may stand between two time mentions that are one list ("in March and April").
_LIST_GAP = re.compile(r"^(\s|,|&|\band\b|\bor\b|\bto\b|\bthrough\b)*$", re.I)


def rule_doubts(question: str, now: datetime, plan: Plan | None = None) -> tuple[Doubt, ...]:
    """Where the rule plan of ``question`` (``plan``, or made here) rests on a default or a guess:
    - ``time_unresolved``: a time word, no period resolved, and the time itself is not what is asked;
    - ``time_several``: two periods that are not one list ("last week, as mentioned on 6 November"):
      the rules take their hull, which is rarely what is meant;
    - ``operation_conflict``: the patterns of two operations match; the rules take the first;
    - ``no_subject``: no entity and no person (I, you, we): the rules know neither who nor what;
    - ``unsplit_coordination``: an "X and Y" the rules would split, in a question they did not find
      distributed: a set asked for, or one shared thing, the patterns cannot tell.
    Pure; a tuple in ``DOUBTS`` order, empty when the rules are sure."""
    now = _utc(now)
    plan = plan or rule_plan(question, now)
    spans = _spans(question, now)
    masked = _mask(question, spans)
    found: set[Doubt] = set()
    asks_time = bool(_ASKS_TIME.search(question))
    if not asks_time and plan.time_from is None and plan.time_to is None and _TIME_CUE.search(question):
        found.add("time_unresolved")
    if not asks_time and any(not _LIST_GAP.match(question[a[1] : b[0]]) for a, b in zip(spans, spans[1:])):
        found.add("time_several")
    if sum(bool(test(masked)) for test, _ in _OPERATIONS) > 1:
        found.add("operation_conflict")
    if not plan.entities and plan.participants == "ambiguous":
        found.add("no_subject")
    if not plan.distributed and split_rewrites(question, plan.entities):
        found.add("unsplit_coordination")
    return tuple(d for d in DOUBTS if d in found)


def rules_unsure(doubts: Iterable[Doubt], triggers: Iterable[Doubt] = DOUBTS) -> bool:
    """Whether the doubts include one that is worth an LLM call (``triggers``)."""
    return not set(doubts).isdisjoint(triggers)


class Planner(Protocol):
    def plan(self, question: str, now: datetime, *, timeout_s: float | None = None) -> tuple[Plan, StageCost]:
        """The plan; ``timeout_s`` bounds what the planner may spend on LLM calls."""
        ...


class RulePlanner:
    """``rule_plan`` behind the planner interface; it spends nothing."""

    def plan(self, question: str, now: datetime, *, timeout_s: float | None = None) -> tuple[Plan, StageCost]:
        return rule_plan(question, now), StageCost(stage="plan")


# --- LLM planner --------------------------------------------------------------------------------


class _LlmPlan(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a stray "profile" is ignored: code decides it
    entities: list[str] = Field(default_factory=list)
    participants: Participants = "ambiguous"
    time: str | None = None
    operation: Operation = "lookup"
    distributed: bool
    fidelity: bool
    rewrites: list[str] = Field(default_factory=list)


class PlanInvalid(ValueError):
    pass


_PLAN = StructuredCall("plan", "query_plan", _LlmPlan, PlanInvalid)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", re.sub(r"'s\b", "", text.casefold())))


def _grounded(entity: str, question_words: set[str]) -> bool:
    """An entity must come from the question: a model-added name is a guessed answer."""
    words = _words(entity)
    return bool(words) and words <= question_words


def _answer_free(rewrite: str, question_words: set[str]) -> bool:
    """No name or number the question lacks (the visible shape of a guessed answer)."""
    for i, token in enumerate(re.findall(r"[A-Za-z0-9][\w'\-]*", rewrite)):
        if not (token[0].isupper() or any(c.isdigit() for c in token)):
            continue
        if i == 0 and token.lower() in _NOT_A_NAME:
            continue
        if not _words(token) <= question_words:
            return False
    return True


class LlmPlanner:
    """One structured LLM call per question; the rule planner on invalid output or LLM failure."""

    def __init__(self, llm: LLM, *, max_tokens: int = 256):
        self.llm = llm
        self.max_tokens = max_tokens
        self.repairs = 0
        self.fallbacks = 0

    def plan(self, question: str, now: datetime, *, timeout_s: float | None = None) -> tuple[Plan, StageCost]:
        attempt = _PLAN.ask(
            self.llm,
            chat(prompts.PLAN_SYSTEM, prompts.plan_user(question)),
            prompts.plan_schema(max_rewrites=MAX_REWRITES),
            max_tokens=self.max_tokens,
            timeout_s=timeout_s,
            read=lambda result: self._plan(question, now, _PLAN.parse(result)),
        )
        self.repairs += attempt.repaired
        if attempt.value is not None:
            return attempt.value, attempt.cost
        self.fallbacks += 1
        log.warning("planner fell back to rules: %s", attempt.error)
        return rule_plan(question, now), attempt.cost

    @staticmethod
    def _plan(question: str, now: datetime, out: _LlmPlan) -> Plan:
        qwords = _words(question)
        # Same rule as the rules planner, whatever the model copied: a filter would hide the asked time.
        time_from, time_to = (None, None) if _ASKS_TIME.search(question) else resolve_time(out.time or "", _utc(now))
        rewrites: list[str] = []
        if out.distributed:
            rewrites = [
                r for r in clean_strings(out.rewrites, 10) if not _same(r, question) and _answer_free(r, qwords)
            ]
        return Plan(
            planner="llm",
            entities=[e for e in clean_strings(out.entities, MAX_ENTITIES) if _grounded(e, qwords)],
            participants=out.participants,
            time_from=time_from,
            time_to=time_to,
            operation=out.operation,
            distributed=out.distributed,
            fidelity=out.fidelity,
            rewrites=rewrites[:MAX_REWRITES],
            history=about_the_past(question, time_from, time_to),
            profile=choose_profile(fidelity=out.fidelity, distributed=out.distributed),
        )


# --- hybrid planner -----------------------------------------------------------------------------


def merge_plans(question: str, rules: Plan, llm: Plan, doubts: Iterable[Doubt]) -> Plan:
    """The rule plan with the fields ``doubts`` put in doubt taken from the LLM's plan: what a pattern
    matched stays the rules' (an LLM plan that fell back to the rules changes nothing). The derived
    fields follow: the profile from the rules' fidelity and the merged ``distributed``, the history
    from the merged period."""
    if llm.planner != "llm":
        return rules
    fields = {f for d in doubts for f in DOUBTED_FIELDS[d]}
    if not fields:
        return rules
    merged = rules.model_dump()
    if "time" in fields:
        merged.update(time_from=llm.time_from, time_to=llm.time_to)
    if "operation" in fields:
        merged.update(operation=llm.operation)
    if "entities" in fields:
        merged.update(entities=llm.entities, participants=llm.participants)
    if "distributed" in fields:
        # The model's answer-free rewrites, or the rules' own split (built from the question's words).
        rewrites = (llm.rewrites or split_rewrites(question, merged["entities"])) if llm.distributed else []
        merged.update(distributed=llm.distributed, rewrites=rewrites)
    merged.update(
        planner="llm",
        history=about_the_past(question, merged["time_from"], merged["time_to"]),
        profile=choose_profile(fidelity=rules.fidelity, distributed=merged["distributed"]),
    )
    return Plan.model_validate(merged)


class HybridPlanner:
    """The rules first; the LLM planner only when the rules doubt the question (``rule_doubts``, those
    in ``triggers``), and then only for the doubted fields. A question the rules are sure of costs no
    call, so its cost has no calls."""

    def __init__(self, llm_planner: Planner, *, triggers: Iterable[Doubt] = DOUBTS):
        self.llm_planner = llm_planner
        self.triggers = frozenset(triggers)
        self.asked = 0  # questions sent to the LLM planner

    def plan(self, question: str, now: datetime, *, timeout_s: float | None = None) -> tuple[Plan, StageCost]:
        rules = rule_plan(question, now)
        doubts = [d for d in rule_doubts(question, now, rules) if d in self.triggers]
        if not doubts:
            return rules, StageCost(stage="plan")
        self.asked += 1
        llm, cost = self.llm_planner.plan(question, now, timeout_s=timeout_s)
        return merge_plans(question, rules, llm, doubts), cost


PLANNER_MODES = ("rules", "llm", "hybrid")


def planner_for(mode: str, llm: LLM | None) -> Planner:
    """The planner of a mode (``PLANNER_MODES``): without an LLM, the rules whatever the mode."""
    if mode not in PLANNER_MODES:
        raise ValueError(f"unknown planner mode {mode!r}: expected one of {', '.join(PLANNER_MODES)}")
    if llm is None or mode == "rules":
        return RulePlanner()
    if mode == "llm":
        return LlmPlanner(llm)
    return HybridPlanner(LlmPlanner(llm))


__all__ = [
    "about_the_past",
    "DOUBTS",
    "Doubt",
    "HybridPlanner",
    "LlmPlanner",
    "PLANNER_MODES",
    "merge_plans",
    "planner_for",
    "rule_doubts",
    "rules_unsure",
    "PlanInvalid",
    "Planner",
    "RulePlanner",
    "choose_profile",
    "resolve_time",
    "rule_plan",
    "split_rewrites",
    "time_range",
]
