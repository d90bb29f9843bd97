"""The query path's prompts and output schemas: the planner, the research rounds, the answer."""

from __future__ import annotations

from typing import Sequence

from memstream.processors.structured import strings_schema, text_schema

PLAN_PARTICIPANTS = ["user", "assistant", "both", "ambiguous"]
PLAN_OPERATIONS = ["lookup", "aggregate", "temporal_select", "sort", "compare"]

PLAN_SYSTEM = """You plan how to search a long conversation memory for a question. Do not answer it.
Return JSON only, following the schema.
- entities: the people, places and things named in the question, copied as written. No guesses.
- participants: whose words hold the evidence: "user" (the asker: I, my, me), "assistant" (you,
  your; also what you said to the asker: "the trail you recommended to me"), "both" (we, us, our,
  you and I), "ambiguous" when unclear.
- time: the period the question restricts the search to, copied from the question (e.g.
  "last week", "in May 2023") or an ISO date, month or year (2023-05-07, 2023-05, 2022).
  Empty when the question asks for a time ("When did ...?") or names none. Do not compute dates.
- operation: lookup (one fact), aggregate (count, total, list all), temporal_select (when, first,
  last, before, after), sort (order, earliest, latest), compare (differences between things).
- distributed: true when the evidence is likely spread over several sessions (lists, counts,
  "both", comparisons, changes over time).
- fidelity: true when the exact wording matters (what exactly was said or written, quotes, code).
- rewrites: only when distributed, at most two sub-questions that each find part of the evidence,
  e.g. "What do Ann and Bo both like?" -> "What does Ann like?", "What does Bo like?".
  Use only words from the question: never put a guessed answer into a rewrite."""


def plan_user(question: str) -> str:
    """The question alone: no date, so the model has nothing to do date arithmetic with; the code
    resolves the time phrase it copies against the question's own date."""
    return f"Question: {question}\n\nReturn the plan JSON."


def plan_schema(max_entities: int = 6, max_rewrites: int = 2) -> dict:
    """The planner output schema; every string and list is bounded so a constrained decoder always
    closes the JSON well within the planner's small token limit."""
    return {
        "type": "object",
        "properties": {
            "entities": strings_schema(max_entities, 60),
            "participants": {"type": "string", "enum": PLAN_PARTICIPANTS},
            "time": text_schema(60),
            "operation": {"type": "string", "enum": PLAN_OPERATIONS},
            "distributed": {"type": "boolean"},
            "fidelity": {"type": "boolean"},
            "rewrites": strings_schema(max_rewrites, 160),
        },
        "required": ["entities", "participants", "time", "operation", "distributed", "fidelity", "rewrites"],
        "additionalProperties": False,
    }


RESEARCH_SYSTEM = """You help search a long conversation memory in rounds. Do not answer the question.
You see the question and the evidence found so far. Return JSON only, following the schema.
- missing: what the question needs that the evidence does not give yet, in a few words ("" if nothing).
- queries: at most three short search queries for what is missing: names, places, things and times
  the evidence mentions that lead to the rest. Empty when nothing is missing.
  Use only words from the question and the evidence: never put a guessed answer into a query."""


def research_user(question: str, evidence_lines: Sequence[str]) -> str:
    found = "\n".join(evidence_lines) or "(nothing yet)"
    return f"Question: {question}\n\nEvidence found so far:\n{found}\n\nReturn the JSON."


def research_schema(max_queries: int = 3) -> dict:
    """The reflection output; bounded like the planner's so a constrained decoder closes the JSON."""
    return {
        "type": "object",
        "properties": {"missing": text_schema(160), "queries": strings_schema(max_queries, 120)},
        "required": ["missing", "queries"],
        "additionalProperties": False,
    }


ANSWER_SYSTEM = """You answer a question about past conversations using only the numbered evidence.
Each evidence line has an id like [E1], a date and a statement. Answer briefly and cite the ids you
used in square brackets. If the evidence does not contain the answer, say you do not know."""


def answer_user(question: str, evidence_lines: Sequence[str], operation: str, profile_text: str | None) -> str:
    profile = f"\nSpeaker profile (background only):\n{profile_text}\n" if profile_text else ""
    return "Evidence:\n" + "\n".join(evidence_lines) + f"\n{profile}\nQuestion ({operation}): {question}\nAnswer:"


# --- query planner ------------------------------------------------------------------------------
