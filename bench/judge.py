"""Answer quality as the field measures it: LoCoMo's token F1 and BLEU-1 beside a lenient
CORRECT/WRONG judge, and LongMemEval's yes/no judge with one rubric per question type.

The prompts are ours, written to the published protocols. LoCoMo (as mem0 and LightMem run it):
categories 1–4; an answer is CORRECT when it refers to the same thing as the gold answer, however
long it is; dates and periods match when they name the same time. LongMemEval: a yes/no verdict per
question type. Temporal reasoning tolerates off-by-one counts of days, weeks or months. Knowledge
updates are correct when they give the newest value, even if they also mention an old one.
Preference questions are judged against a rubric. Abstention questions are correct when the answer
says the information is not available. The judge model is whatever LLM port it is given; its calls
and tokens are counted in the ``judge`` stage.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from memstream.ports import LLM
from memstream.processors.structured import call_with_repair, parse_output
from memstream.schemas import StageCost

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, punctuation and articles removed, whitespace collapsed (LoCoMo's normalisation)."""
    text = str(text).lower().replace(",", "")
    return " ".join(_ARTICLES.sub(" ", text.translate(_PUNCTUATION)).split())


def token_f1(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall between the normalised answers."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if not pred or not ref or not common:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, gold: str) -> float:
    """Unigram BLEU: clipped unigram precision times the brevity penalty (one reference)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return 0.0
    precision = sum((Counter(pred) & Counter(ref)).values()) / len(pred)
    brevity = 1.0 if len(pred) > len(ref) else math.exp(1 - len(ref) / len(pred))
    return precision * brevity


LOCOMO_JUDGE_SYSTEM = """You grade answers to questions about a long conversation.
You get the question, the gold answer and a generated answer. Label the generated answer CORRECT when
it refers to the same thing as the gold answer, even if it is longer, worded differently or adds detail.
For times, CORRECT when it names the same date or period in any format ("May 7th" vs "7 May").
Label it WRONG when it contradicts the gold answer, misses its point, or says it does not know.
Reply with JSON: a short reason, then the label."""

LONGMEMEVAL_RUBRICS: dict[str, str] = {
    "default": "Answer yes if the response contains the correct answer, or an equivalent of it, or all the "
    "steps that lead to it. Answer no if it gives only part of what is asked, or something else.",
    "temporal-reasoning": "Answer yes if the response contains the correct answer, or an equivalent of it. "
    "Do not penalise counts of days, weeks or months that are off by one. "
    "Answer no if it gives only part of what is asked, or something else.",
    "knowledge-update": "The user's information changed over time; the correct answer is the newest value. "
    "Answer yes if the response gives the newest value, even if it also mentions an older one. "
    "Answer no if it gives only an older value, or something else.",
    "single-session-preference": "The correct answer is a rubric for a personalised response. Answer yes if the "
    "response uses the user's own information as the rubric asks. It need not cover "
    "every point of the rubric. Answer no if it ignores what the user told us.",
    "abstention": "This question cannot be answered from the conversations. Answer yes if the response says the "
    "information is not available or not enough. Answer no if it gives an answer.",
}

LONGMEMEVAL_JUDGE_SYSTEM = """You check whether a chat assistant's response answers a question about its past
conversations with a user. Follow the rubric. Reply with JSON: a short reason, then the verdict (yes or no)."""


def longmemeval_rubric(question_type: str, question_id: str = "") -> str:
    if question_id.endswith("_abs"):
        return LONGMEMEVAL_RUBRICS["abstention"]
    return LONGMEMEVAL_RUBRICS.get(question_type, LONGMEMEVAL_RUBRICS["default"])


def locomo_judge_user(question: str, gold: str, answer: str) -> str:
    return f"Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}"


def longmemeval_judge_user(question_type: str, question_id: str, question: str, gold: str, answer: str) -> str:
    label = "Rubric for the response" if question_type == "single-session-preference" else "Correct answer"
    return (
        f"Rubric: {longmemeval_rubric(question_type, question_id)}\n\nQuestion: {question}\n"
        f"{label}: {gold}\nResponse: {answer}"
    )


def _schema(field: str, values: list[str]) -> dict:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["reason", field],
        "properties": {"reason": {"type": "string", "maxLength": 300}, field: {"type": "string", "enum": values}},
    }


class _Label(BaseModel):
    model_config = ConfigDict(extra="ignore")
    label: Literal["CORRECT", "WRONG"]


class _Verdict(BaseModel):
    model_config = ConfigDict(extra="ignore")
    verdict: Literal["yes", "no"]


V = TypeVar("V", _Label, _Verdict)


class JudgeOutputInvalid(ValueError):
    """The judge's output could not be read as a verdict."""


class Judge:
    """The LLM judge; an unreadable verdict after one repair counts as wrong (and is reported)."""

    def __init__(self, llm: LLM, *, max_tokens: int = 200):
        self.llm = llm
        self.max_tokens = max_tokens
        self.unreadable = 0

    def locomo(self, question: str, gold: str, answer: str) -> tuple[bool, StageCost]:
        user = locomo_judge_user(question, gold, answer)
        grade, cost = self._verdict(LOCOMO_JUDGE_SYSTEM, user, _Label, "label", ["CORRECT", "WRONG"], "grade")
        return grade is not None and grade.label == "CORRECT", cost

    def longmemeval(
        self, question_type: str, question_id: str, question: str, gold: str, answer: str
    ) -> tuple[bool, StageCost]:
        user = longmemeval_judge_user(question_type, question_id, question, gold, answer)
        verdict, cost = self._verdict(LONGMEMEVAL_JUDGE_SYSTEM, user, _Verdict, "verdict", ["yes", "no"], "verdict")
        return verdict is not None and verdict.verdict == "yes", cost

    def _verdict(
        self, system: str, user: str, shape: type[V], field: str, values: list[str], schema_name: str
    ) -> tuple[V | None, StageCost]:
        """The judge's verdict as ``shape`` (``field``, one of ``values``), None when unreadable after one repair."""
        attempt = call_with_repair(
            self.llm,
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            stage="judge",
            schema=_schema(field, values),
            schema_name=schema_name,
            max_tokens=self.max_tokens,
            invalid=JudgeOutputInvalid,
            read=lambda r: parse_output(r, shape, JudgeOutputInvalid),
        )
        self.unreadable += attempt.value is None
        return attempt.value, attempt.cost


__all__ = [
    "normalize_answer",
    "token_f1",
    "bleu1",
    "Judge",
    "LOCOMO_JUDGE_SYSTEM",
    "LONGMEMEVAL_JUDGE_SYSTEM",
    "LONGMEMEVAL_RUBRICS",
    "longmemeval_rubric",
    "locomo_judge_user",
    "longmemeval_judge_user",
]
