"""The query path over the real pipeline: triggers, Compose across sessions, Replay, tenant isolation."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.processors.ids import point_id
from memstream.schemas import Card, MemoryWrite, Provenance
from tests.factories import memory_write, scene
from tests.factories import source as source_turn

from .conftest import unique_id

pytestmark = pytest.mark.integration

T0 = datetime(2024, 3, 4, 18, 0, tzinfo=timezone.utc)

# Everyday statements with nothing to do with restaurants, dinners, hikes or mountains.
DISTRACTORS = [
    "Priya repaired the printer on the third floor.",
    "Leo is learning to play the cello.",
    "The quarterly report is due on Friday.",
    "Mia moved to a flat near the river.",
    "Omar bought a second-hand electric car.",
    "The office plants need watering twice a week.",
    "Jonas prefers dark mode in every editor.",
    "Ava is reading a novel about lighthouses.",
    "The team switched from Jira to Linear in January.",
    "Ben's daughter started primary school.",
    "Sara collects vintage postcards from Portugal.",
    "The server migration finished over the weekend.",
    "Noah runs a podcast about board games.",
    "Elif is training for a chess tournament.",
    "The new badge readers were installed at the entrance.",
    "Kai writes unit tests before the code.",
    "Lena volunteers at the animal shelter on Sundays.",
    "The VPN certificate expires in April.",
    "Ruth translated the manual into German.",
    "Tariq plays bass in a jazz trio.",
    "The coffee machine on the second floor is broken.",
    "Ines knits scarves for her nieces.",
    "Marco switched his phone plan to save money.",
    "The design review moved to Tuesday.",
]


def write_with_triggers(tenant: str, conversation: str) -> MemoryWrite:
    """A memory write as a strong extractor would produce it: a bridge trigger on Dana's allergy card
    and a horizon trigger on the scene about Sam's knee."""
    turns = [
        ("Dana", "By the way, I can't have shellfish or fish, I'm allergic."),
        ("Sam", "My knee surgery is next week, the doctor says no long walks for three months."),
        *[("Kim", text) for text in DISTRACTORS],
    ]
    source = [
        source_turn(f"D1:{i + 1}", spk, text, i, at=T0 + timedelta(minutes=i)) for i, (spk, text) in enumerate(turns)
    ]
    allergy_scene = point_id("scene", tenant, conversation, ["D1:1"], "allergy")
    knee_scene = point_id("scene", tenant, conversation, ["D1:2"], "knee")
    other_scene = point_id("scene", tenant, conversation, ["D1:3"], "office")

    def card(i: int, subject: str, content: str, scene: str, bridge: list[str] | None = None) -> Card:
        return Card(
            card_id=point_id("card", tenant, conversation, [source[i].turn_id], content),
            subject=subject,
            type="fact",
            content=content,
            event_time=source[i].event_time,
            provenance=Provenance(turn_ids=[source[i].turn_id], scene_id=scene, session_ids=["S1"]),
            entity_triggers=[subject],
            bridge_triggers=bridge or [],
            speaker=source[i].speaker,
            valid_from=source[i].event_time,
        )

    cards = [
        card(
            0,
            "Dana",
            "Dana is allergic to seafood.",
            allergy_scene,
            bridge=["choosing a restaurant for the team dinner"],
        ),
        card(1, "Sam", "Sam has knee surgery next week and must avoid long walks for three months.", knee_scene),
        *[card(i + 2, text.split()[0], text, other_scene) for i, text in enumerate(DISTRACTORS)],
    ]
    office = [t.turn_id for t in source[2:]]
    scenes = [
        scene(allergy_scene, "allergy", "Dana mentions a food allergy.", ["Dana"], ["D1:1"], at=T0),
        scene(
            knee_scene,
            "surgery",
            "Sam talks about an upcoming knee operation.",
            ["Sam"],
            ["D1:2"],
            at=T0,
            horizon_triggers=["planning a mountain hike with friends"],
        ),
        scene(other_scene, "office news", "Kim shares assorted office news.", ["Kim"], office, at=T0),
    ]
    fields = {"write_id": "w-triggers", "flush_id": "f-triggers", "mode": "llm", "scenes": scenes, "written_at": T0}
    return memory_write(tenant, cards, source, conversation=conversation, **fields)


def found(reply, turn_id: str):
    return [e for e in reply.evidence if turn_id in e.turn_ids]


@pytest.fixture
def pipe(shared_pipeline):
    """The module's deployment: its tests only write and ask, each under tenants of its own."""
    return shared_pipeline()


def test_associative_questions_reach_their_evidence_through_bridge_and_horizon_triggers(pipe):
    acme, globex = unique_id("acme"), unique_id("globex")
    write = write_with_triggers(acme, "offsite")
    pipe.produce_raw("cards", write.key.encode(), write.to_bytes())
    pipe.drain()

    # No word in common with "Dana is allergic to seafood."
    dinner = pipe.ask(
        "Which restaurant should we pick for the team dinner?", tenant=acme, conversation="offsite", answer=False
    )
    assert dinner.ok, dinner.error
    allergy = found(dinner, "D1:1")
    assert allergy and "trigger" in allergy[0].found_by, [(e.text, e.found_by) for e in dinner.evidence]

    # No word in common with Sam's card: its scene's horizon trigger brings it.
    hike = pipe.ask("Who could join a mountain hike next month?", tenant=acme, conversation="offsite", answer=False)
    knee = found(hike, "D1:2")
    assert knee and "trigger" in knee[0].found_by, [(e.text, e.found_by) for e in hike.evidence]

    other = pipe.ask(
        "Which restaurant should we pick for the team dinner?", tenant=globex, conversation="offsite", answer=False
    )
    assert other.ok and other.evidence == []


def demo_turns(tenant: str = "acme"):
    sample = load_locomo(demo_conversation_path())[0]
    return sample.sample_id, list(locomo_turns(sample, tenant_id=tenant))


def test_compose_gathers_evidence_from_two_sessions_and_replay_returns_the_raw_turns(pipe):
    acme, globex = unique_id("acme"), unique_id("globex")
    conversation, turns = demo_turns(acme)
    pipe.produce(turns)
    pipe.drain()

    # The Lake Brenn ride is planned in session 1 and cancelled in session 3.
    reply = pipe.ask(
        "List everything Nora and Tomas said about the ride to Lake Brenn.",
        tenant=acme,
        conversation=conversation,
        answer=False,
    )
    assert reply.ok, reply.error
    assert reply.plan.distributed and reply.access_profile == "compose"
    sessions = {s for e in reply.evidence for s in e.session_ids}
    assert (found(reply, "D1:5") or found(reply, "D1:6")) and found(reply, "D3:8"), [
        (e.turn_ids, e.text) for e in reply.evidence
    ]
    assert {"S1", "S3"} <= sessions
    assert len(reply.evidence) <= 10  # the same K as Lookup

    exact = pipe.ask(
        "What exactly did Nora say Ines told her about why the bowl cracked?",
        tenant=acme,
        conversation=conversation,
        answer=False,
    )
    assert exact.plan.fidelity and exact.access_profile == "replay"
    assert all(e.kind == "turn" and e.found_by == ["replay"] for e in exact.evidence)
    raw = {e.turn_ids[0]: e.text for e in exact.evidence}
    assert raw.get("D2:4") == "Nora: She said the walls were too thick and air was trapped in the clay."
    assert exact.context_tokens <= 1200

    for profile in ("lookup", "compose", "replay"):
        other = pipe.ask(
            "Why did the bowl crack?", tenant=globex, conversation=conversation, profile=profile, answer=False
        )
        assert other.ok and other.evidence == [], profile


def test_the_llm_planner_against_the_local_server_returns_a_valid_plan_and_counts_its_call(local_llm):
    from memstream.adapters.openai_llm import OpenAICompatibleLLM
    from memstream.processors.query.plan import LlmPlanner, choose_profile

    llm = OpenAICompatibleLLM(local_llm["MEMSTREAM_LLM_BASE_URL"], local_llm["MEMSTREAM_LLM_MODEL"], "none")
    now = datetime(2024, 6, 1, tzinfo=timezone.utc)
    plan, cost = LlmPlanner(llm).plan("What did Nora and Tomas both say about Lake Brenn last month?", now)
    assert cost.stage == "plan" and 1 <= cost.calls <= 2 and cost.prompt_tokens > 0
    # A 135M model's plan is not judged for sense, only for shape: the rules apply to whatever it chose.
    assert plan.profile == choose_profile(fidelity=plan.fidelity, distributed=plan.distributed)
    assert len(plan.rewrites) <= 2 and (plan.distributed or not plan.rewrites)
    assert all(e.lower() in "what did nora and tomas both say about lake brenn last month?" for e in plan.entities)
    if plan.time_from and plan.time_to:
        assert plan.time_from <= plan.time_to


def test_the_research_reflection_against_the_local_server_returns_bounded_queries_and_counts_its_call(local_llm):
    from memstream.adapters.openai_llm import OpenAICompatibleLLM
    from memstream.processors.query.research import LlmReflector

    llm = OpenAICompatibleLLM(local_llm["MEMSTREAM_LLM_BASE_URL"], local_llm["MEMSTREAM_LLM_MODEL"], "none")
    found = [
        {"text": "Nora's sister Ines runs a pottery studio in Lake Brenn.", "subject": "Nora"},
        {"text": "The bowl cracked in the kiln.", "subject": "Nora", "entity_triggers": ["kiln"]},
    ]
    queries, cost = LlmReflector(llm).reflect("Where does Nora's sister work and what did she make?", found, 3)
    assert cost.stage == "research" and 1 <= cost.calls <= 2 and cost.prompt_tokens > 0
    # Shape, not sense: at most three short queries, none the question itself.
    assert len(queries) <= 3 and all(0 < len(q) <= 200 for q in queries)
    assert all(q.lower() != "where does nora's sister work and what did she make?" for q in queries)
