"""Prompts are cache-friendly: providers' prompt caches reuse the longest identical prefix of a
call, which begins with its structured-output schema (OpenAI serves it as a prefix to the system
message), so each call's fixed part (schema, instructions, output rules) comes first and is the same
byte for byte from call to call, and what varies (the flush, the question, the evidence) comes last.
The calls are captured from the processors themselves, as they assemble them."""

import json
from datetime import datetime, timezone

from memstream.ports import LLMError
from memstream.processors.consolidation import prompts as consolidation_prompts
from memstream.processors.consolidation.consolidate import Candidate, ConsolidateParams, LlmDecider
from memstream.processors.consolidation.versioning import CardView
from memstream.processors.query import prompts as query_prompts
from memstream.processors.query.answer import answer_messages
from memstream.processors.query.plan import LlmPlanner
from memstream.processors.query.research import LlmReflector
from memstream.processors.write import prompts as write_prompts
from memstream.processors.write.extract import LlmExtractor
from memstream.schemas.query import Evidence
from tests.factories import flush_of, turn

NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)


class Recording:
    """An LLM that keeps what it was sent and refuses (the processors fall back to their rules)."""

    model = "m"

    def __init__(self):
        self.sent: list[list[dict[str, str]]] = []

    def complete(self, messages, **kwargs):
        schema = kwargs.get("json_schema")
        head = [{"role": "schema", "content": json.dumps(schema, sort_keys=True)}] if schema is not None else []
        self.sent.append(head + [dict(m) for m in messages])
        raise LLMError("bad request", "client")


def wire(messages) -> str:
    """The call in the order a provider reads (and caches) it: the schema, then the messages."""
    return "".join(f"<{m['role']}>{m['content']}" for m in messages)


def common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def fixed_part(call, instructions: str) -> str:
    """The schema (when the call has one) and the instructions: what must come first, unchanged."""
    head = wire(call[:1]) if call[0]["role"] == "schema" else ""
    return head + f"<system>{instructions}"


def assert_fixed_part_first(first, second, instructions: str) -> None:
    a, b = wire(first), wire(second)
    assert a != b
    assert common_prefix(a, b) >= len(fixed_part(first, instructions))


def test_two_flushes_share_the_extraction_instructions_as_their_prefix():
    llm = Recording()
    extractor = LlmExtractor(llm)
    extractor.extract(flush_of(turn("D1:1", "I adopted a dog named Pepper.", speaker="Nora")))
    extractor.extract(
        flush_of(
            turn("D7:1", "We moved to Lisbon last May.", speaker="Tomas"),
            turn("D7:2", "How is the new flat?", speaker="Nora", seq=1),
        )
    )
    assert_fixed_part_first(*llm.sent, write_prompts.EXTRACT_SYSTEM)
    assert all(call[0]["role"] == "schema" for call in llm.sent)


def test_with_enums_of_each_flushs_ids_the_schema_differs_and_no_cache_reaches_the_instructions():
    llm = Recording()
    extractor = LlmExtractor(llm, stable_schema=False)  # the local server's constrained decoder
    extractor.extract(flush_of(turn("D1:1", "I adopted a dog named Pepper.", speaker="Nora")))
    extractor.extract(flush_of(turn("D7:1", "We moved to Lisbon last May.", speaker="Tomas")))
    first, second = llm.sent
    assert '"D1:1"' in first[0]["content"] and common_prefix(wire(first), wire(second)) < len(wire(first[:1]))


def test_two_questions_share_the_planner_and_research_instructions():
    llm = Recording()
    planner, reflector = LlmPlanner(llm), LlmReflector(llm)
    planner.plan("What is the name of Tomas's dog?", NOW)
    planner.plan("Where did Nora go hiking last week?", NOW)
    reflector.reflect("What is the name of Tomas's dog?", [{"text": "Tomas adopted a dog."}], 3)
    reflector.reflect("Where did Nora go hiking?", [], 3)
    plans, research = llm.sent[:2], llm.sent[2:]
    assert_fixed_part_first(*plans, query_prompts.PLAN_SYSTEM)
    assert_fixed_part_first(*research, query_prompts.RESEARCH_SYSTEM)


def test_two_questions_share_the_answer_instructions():
    def evidence(text: str) -> Evidence:
        return Evidence(evidence_id="E1", kind="card", point_id="p1", text=text, score=1.0, found_by=["dense"])

    first = answer_messages("What is the dog's name?", "lookup", [evidence("Tomas's dog is Pepper.")], None)
    second = answer_messages("Where does Tomas live?", "lookup", [evidence("Tomas lives in Lisbon.")], "Tomas: runner")
    assert_fixed_part_first(first, second, query_prompts.ANSWER_SYSTEM)


def test_two_consolidations_share_the_instructions():
    def card(card_id: str, text: str) -> CardView:
        return CardView(card_id, "Tomas", "fact", text, None, 1.7e9)

    llm = Recording()
    decider = LlmDecider(llm, ConsolidateParams())
    decider.decide(card("a", "Tomas lives in Lisbon."), [Candidate(card("b", "Tomas lives in Porto."), {}, 0.9)])
    decider.decide(card("c", "Tomas has a dog."), [Candidate(card("d", "Tomas has a cat."), {}, 0.85)])
    decider.decide(
        card("e", "Tomas runs."),
        [Candidate(card("f", "Tomas jogs."), {}, 0.9), Candidate(card("g", "Tomas swims."), {}, 0.8)],
    )
    # queues of one and of two candidates: the same schema (labels C1..C{top_n}), so all three share it
    assert_fixed_part_first(*llm.sent[:2], consolidation_prompts.CONSOLIDATE_SYSTEM)
    assert_fixed_part_first(llm.sent[0], llm.sent[2], consolidation_prompts.CONSOLIDATE_SYSTEM)
    labels = json.loads(llm.sent[2][0]["content"])["properties"]["decisions"]["items"]["properties"]["candidate"]
    assert labels["enum"] == [f"C{i + 1}" for i in range(ConsolidateParams().top_n)]
