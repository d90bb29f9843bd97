"""The pure parts of ``memstream bench llm-throughput``: questions picked, flushes moved to other
tenants without changing what the LLM is asked, figures per unit."""

from __future__ import annotations

from datetime import datetime, timezone

from memstream.bench.llm_throughput import Run, per_item, pick_questions, retenanted, tenant_of
from memstream.datasets import demo_conversation_path, load_locomo
from memstream.processors.write.extract import LlmExtractor
from memstream.schemas import StmFlush
from memstream.schemas.memory import FlushSegment
from tests.factories import compressed, turn


def a_flush(tenant: str) -> StmFlush:
    turns = [compressed(turn(f"D1:{i}", f"line {i}", tenant=tenant)) for i in range(1, 4)]
    return StmFlush(
        tenant_id=tenant,
        conversation_id="c1",
        flush_id="f1",
        reason="budget",
        segments=[FlushSegment(segment_id="s1", topic_label="lines", turns=turns)],
        tokens=30,
        flushed_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    )


class Recorder:
    model = "recorder"

    def __init__(self) -> None:
        self.messages: list = []

    def complete(self, messages, **kwargs):  # the LLM port, recording what it is asked
        from memstream.ports import LLMError

        self.messages.append(list(messages))
        raise LLMError("recorded", "client")


def test_a_retenanted_flush_is_the_same_flush_of_another_tenant_and_asks_the_llm_the_same():
    flush = a_flush("llm-bench-0")
    key, value = retenanted({"key": flush.key, "value": flush.to_bytes().decode()}, copy=2)
    moved = StmFlush.from_bytes(value)
    assert key == "llm-bench-0-c2/c1" and moved.key == key
    assert {t.turn.tenant_id for t in moved.turns()} == {"llm-bench-0-c2"}
    assert [t.turn.text for t in moved.turns()] == [t.turn.text for t in flush.turns()]
    recorder = Recorder()
    for f in (flush, moved):
        LlmExtractor(recorder).extract(f)  # falls back to extractive after the recorded call
    assert recorder.messages[0] == recorder.messages[1], "the replay server matches the copies' calls"


def test_questions_alternate_between_conversations_skip_adversarial_ones_and_carry_a_fixed_time():
    samples = load_locomo(demo_conversation_path()) * 2
    questions = pick_questions(samples, 5)
    assert [q["tenant"] for q in questions] == [tenant_of(i) for i in (0, 1, 0, 1, 0)]
    assert all(q["question_time"] == questions[0]["question_time"] for q in questions)
    texts = {qa.question: qa.category for qa in samples[0].qa}
    assert all(texts[q["question"]] != 5 for q in questions)


def test_figures_per_unit():
    run = Run(in_flight=4, items=500, seconds=10.0, per_s=50.0, calls=12, prompt_tokens=20_000, completion_tokens=5_000)
    assert per_item(run, 1000) == {"calls": 24.0, "prompt_tokens": 40_000.0, "completion_tokens": 10_000.0}
    assert per_item(run)["calls"] == 0.02


def test_the_first_flushes_of_each_conversation_in_order():
    from memstream.bench.llm_throughput import LlmThroughputOptions, first_flushes

    pairs = [("a/1", "1"), ("b/1", "2"), ("a/1", "3"), ("a/1", "4"), ("b/1", "5")]
    flushes = [{"key": k, "value": v} for k, v in pairs]
    kept = first_flushes(flushes, LlmThroughputOptions(flushes_per_conversation=2))
    assert [f["value"] for f in kept] == ["1", "2", "3", "5"]
