"""Answer scores (pure) and the judges' handling of the LLM's verdicts (scripted LLM port)."""

import orjson
import pytest

from memstream.bench.judge import Judge, bleu1, longmemeval_judge_user, longmemeval_rubric, normalize_answer, token_f1
from memstream.ports import LLMError, LlmResult


def test_answers_are_normalised_before_scoring():
    assert normalize_answer("The Lake, in May!") == "lake in may"
    assert token_f1("in May 2023", "May 2023") == pytest.approx(0.8)
    assert token_f1("Denver", "Boston") == 0.0 and token_f1("", "Boston") == 0.0
    assert token_f1("the Denver", "Denver.") == 1.0


def test_bleu1_is_clipped_unigram_precision_with_a_brevity_penalty():
    assert bleu1("a cat a cat", "cat") == pytest.approx(0.5)  # articles dropped: "cat cat", clipped to 1 of 2
    assert bleu1("cat dog", "cat") == pytest.approx(0.5)
    assert bleu1("cat", "cat dog bird") == pytest.approx(1.0 * 2.718281828 ** (1 - 3))
    assert bleu1("", "cat") == 0.0


def test_each_question_type_gets_its_rubric():
    assert "off by one" in longmemeval_rubric("temporal-reasoning")
    assert "newest value" in longmemeval_rubric("knowledge-update")
    assert "not available" in longmemeval_rubric("multi-session", "abc_abs")
    assert longmemeval_rubric("unknown-type") == longmemeval_rubric("multi-session")
    assert "Rubric for the response" in longmemeval_judge_user("single-session-preference", "q", "Q?", "likes tea", "A")


class ScriptedLLM:
    model = "scripted"

    def __init__(self, *outputs):
        self.outputs = list(outputs)

    def complete(self, messages, *, json_schema=None, schema_name="output", max_tokens=None, timeout_s=None):
        out = self.outputs.pop(0)
        if isinstance(out, Exception):
            raise out
        content = out if isinstance(out, str) else orjson.dumps(out).decode()
        return LlmResult(content=content, prompt_tokens=50, completion_tokens=10, model="scripted")


def test_the_judges_read_verdicts_repair_once_and_count_every_call():
    judge = Judge(ScriptedLLM({"reason": "same city", "label": "CORRECT"}))
    ok, cost = judge.locomo("Where?", "Denver", "She lives in Denver now.")
    assert ok and cost.calls == 1 and cost.prompt_tokens == 50 and cost.stage == "judge"
    judge = Judge(ScriptedLLM("maybe", {"reason": "old value", "verdict": "no"}))
    ok, cost = judge.longmemeval("knowledge-update", "q1", "Where?", "Denver", "Boston")
    assert not ok and cost.calls == 2 and judge.unreadable == 0
    judge = Judge(ScriptedLLM("??", "still ??"))
    ok, cost = judge.longmemeval("multi-session", "q2", "How many?", "3", "3")
    assert not ok and cost.calls == 2 and judge.unreadable == 1  # unreadable counts as wrong, and is reported
    judge = Judge(ScriptedLLM(LLMError("down")))
    ok, cost = judge.locomo("Where?", "Denver", "Denver")
    assert not ok and cost.calls == 1 and judge.unreadable == 1
