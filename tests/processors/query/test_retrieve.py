"""Pool, fusion, rerank, dedup, trigger promotion order and the topic cascade, on hand-made vectors."""

from datetime import datetime, timezone

import numpy as np

from memstream.ports import StoreHit
from memstream.processors.query.cascade import NOISE, density_clusters, rank_topics
from memstream.processors.query.evidence import roles_for, time_range
from memstream.processors.query.replay import replay_window
from memstream.processors.query.retrieve import Candidate, Pool, RetrievalParams, mentions_entity, rerank, top_k, top_up
from memstream.schemas import Plan


def unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


def hit(pid: str, vector=None, text=None, **payload) -> StoreHit:
    return StoreHit(pid, 0.0, {"text": text or pid, **payload}, vector)


Q = np.asarray([unit(1, 0, 0)], dtype=np.float32)
PARAMS = RetrievalParams(min_similarity=0.15, entity_weight=0.5)


def test_a_card_found_twice_is_one_candidate_with_both_votes():
    pool = Pool()
    pool.add("dense:0:None", "dense", [hit("a", unit(1, 0, 0)), hit("b", unit(0, 1, 0))])
    pool.add("sparse:0:None", "sparse", [hit("b"), hit("c")])
    assert len(pool) == 3
    assert pool.items["b"].found_by == {"dense", "sparse"}
    assert pool.items["b"].ranks == {"dense:0:None": 1, "sparse:0:None": 0}
    assert pool.items["c"].vector is None and pool.items["b"].vector is not None  # the first hit's vector stays


def test_rerank_orders_by_semantic_rank_plus_other_votes():
    pool = Pool()
    pool.add("dense:0:None", "dense", [hit("near", unit(1, 0.1, 0)), hit("mid", unit(1, 0.6, 0))])
    pool.add("sparse:0:None", "sparse", [hit("mid", unit(1, 0.6, 0))])
    ranked = rerank(pool, Q, [], PARAMS)
    # "mid" is semantically second but the BM25 vote lifts it above "near".
    assert [c.id for c in ranked] == ["mid", "near"]


def test_a_dissimilar_card_found_by_nothing_else_does_not_score():
    pool = Pool()
    pool.add("dense:0:None", "dense", [hit("near", unit(1, 0, 0)), hit("far", unit(0, 0, 1))])
    pool.add("trigger:None", "trigger", [hit("promoted", unit(0, 1, 0))])
    ids = [c.id for c in rerank(pool, Q, [], PARAMS)]
    assert "far" not in ids  # cosine 0 < 0.15 and dense only
    assert "promoted" in ids  # as dissimilar, but a trigger promoted it


def test_naming_a_planned_entity_earns_a_vote():
    pool = Pool()
    pool.add(
        "dense:0:None",
        "dense",
        [hit("x", unit(1, 0.2, 0), subject="Melanie"), hit("y", unit(1, 0.25, 0), subject="Caroline")],
    )
    assert [c.id for c in rerank(pool, Q, ["caroline"], PARAMS)] == ["y", "x"]
    assert [c.id for c in rerank(pool, Q, [], PARAMS)] == ["x", "y"]
    assert mentions_entity({"subject": "Ann", "entity_triggers": ["Paris"]}, ["paris"])
    assert not mentions_entity({"subject": "Ann"}, [])


def test_top_k_drops_the_same_sentence_said_twice_and_stops_at_k():
    pool = Pool()
    pool.add(
        "dense:0:None",
        "dense",
        [
            hit("a", unit(1, 0, 0), text="I love  Paris"),
            hit("b", unit(1, 0.1, 0), text="i love paris"),
            hit("c", unit(1, 0.2, 0), text="Rome"),
            hit("d", unit(1, 0.3, 0), text="Oslo"),
        ],
    )
    assert [c.id for c in top_k(rerank(pool, Q, [], PARAMS), 2)] == ["a", "c"]


def cand(pid: str, text: str, *turns: str) -> Candidate:
    return Candidate(pid, {"text": text, "turn_ids": list(turns)}, None)


def test_top_up_adds_what_is_new_after_the_chosen_until_k_or_the_budget():
    chosen = [cand("a", "We ran in March", "D1:1")]
    wider = [
        cand("a", "We ran in March", "D1:1"),  # already chosen
        cand("b", "we ran in march", "D2:1"),  # the same text
        cand("c", "I missed the fun run for work", "D1:1"),  # its turn is covered
        cand("d", "The fun run was on the 5th", "D3:1"),
        cand("e", "Another run, in April, rained out", "D4:1"),
        cand("f", "Later", "D5:1"),
    ]
    assert [c.id for c in top_up(chosen, wider, 3, new_turns_only=True)] == ["a", "d", "e"]
    assert [c.id for c in top_up(chosen, wider, 4)] == ["a", "c", "d", "e"]  # every turn allowed
    # 4 + 7 tokens fit 12; the next (7 more) would not.
    assert [c.id for c in top_up(chosen, wider, 10, max_tokens=12, new_turns_only=True)] == ["a", "d"]
    assert top_up(chosen, [], 5) == chosen


def test_density_clusters_group_close_scenes_and_leave_outliers():
    vectors = np.asarray([unit(1, 0.05, 0), unit(1, 0, 0.05), unit(1, 0.02, 0.02), unit(0, 1, 0), unit(0, 0, 1)])
    labels = density_clusters(vectors, eps=0.1, min_samples=2)
    assert labels[0] == labels[1] == labels[2] != NOISE
    assert labels[3] == NOISE and labels[4] == NOISE


def test_topics_rank_by_best_scene_with_a_share_of_the_rest():
    vectors = np.asarray([unit(1, 0.05, 0), unit(1, 0, 0.05), unit(0, 1, 0)])
    topics = rank_topics(vectors, [0.50, 0.48, 0.55], eps=0.1)
    # The two-scene topic (0.50 + 0.1 * 0.48 = 0.548) stays just under the lone 0.55 scene.
    assert [t.members for t in topics] == [(2,), (0, 1)]
    topics = rank_topics(vectors, [0.54, 0.50, 0.55], eps=0.1)
    assert topics[0].members == (0, 1)


def test_participant_resolution():
    assert roles_for("user") == ("user",)
    assert roles_for("assistant") == ("assistant",)
    assert roles_for("both") == (None,)
    assert roles_for("ambiguous") == ("user", "assistant")  # each side searched, then fused


def test_time_range_and_replay_window():
    from datetime import datetime, timezone

    start = datetime(2023, 5, 1, tzinfo=timezone.utc)
    plan = Plan(planner="rules", profile="lookup", time_from=start)
    assert time_range(plan) == (start.timestamp(), None)
    assert time_range(Plan(planner="rules", profile="lookup")) is None
    assert replay_window([5, 6, 0], 1) == [0, 1, 4, 5, 6, 7]


def test_a_trigger_text_that_many_memories_share_promotes_none_of_them():
    from memstream.processors.query.retrieve import discriminative

    common = [StoreHit(f"t{i}", 0.9, {"text": "Caroline", "host_id": f"card{i}"}) for i in range(5)]
    rare = [
        StoreHit("r1", 0.6, {"text": "team dinner", "host_id": "cardX"}),
        StoreHit("r2", 0.6, {"text": "Team Dinner", "host_id": "cardY"}),
    ]
    kept = discriminative(common + rare, max_hosts=3)
    assert [h.id for h in kept] == ["r1", "r2"]  # two hosts share "team dinner": still specific
    assert discriminative(common, max_hosts=5) == common


def test_the_profile_is_the_evidence_only_when_nothing_scored():
    from memstream.processors.query.evidence import profile_evidence

    hits = [
        StoreHit("p1", 0.4, {"subject": "Nora", "field": "preferences", "text": "no seafood", "turn_ids": ["D1:9"]})
    ]
    evidence = profile_evidence(hits)
    assert [(e.kind, e.found_by, e.turn_ids, e.text) for e in evidence] == [
        ("profile", ["profile"], ["D1:9"], "Nora preferences: no seafood")
    ]
    assert profile_evidence([]) == []


def test_only_current_versions_are_evidence_unless_the_question_is_about_the_past():
    from memstream.processors.query.plan import about_the_past, rule_plan
    from memstream.processors.query.retrieve import Scope

    assert Scope("t", "c").cards(None).not_equals == {"retired": True}
    assert Scope("t", "c", history=True).cards("user").not_equals == {}
    assert Scope("t", "c", history=True).without_time().history
    now = datetime(2024, 6, 1, tzinfo=timezone.utc)
    assert not rule_plan("Where does Maria live?", now).history
    assert rule_plan("Where did Maria live before?", now).history
    assert rule_plan("What did Maria use to eat for breakfast?", now).history
    assert not rule_plan("What knife do I use to cut bread?", now).history
    assert rule_plan("What did Maria eat in May 2024?", now).history  # a period: superseded versions count
    assert about_the_past("Which team did Ben play for previously?", None, None)


def test_the_adaptive_policy_stops_where_the_scores_drop_off_within_the_budget():
    from memstream.processors.query.retrieve import adaptive_count, within_budget

    scores = [1.0, 0.9, 0.8, 0.7, 0.3, 0.29, 0.28]
    tokens = [20] * 7
    assert adaptive_count(scores, tokens, budget=1000, dropoff=0.5, min_items=2) == 4  # 0.3 < 0.5 × 1.0
    assert adaptive_count(scores, tokens, budget=50, dropoff=0.5, min_items=2) == 2  # the budget first
    assert adaptive_count(scores, tokens, budget=1000, dropoff=0.95, min_items=3) == 3  # at least min_items
    assert adaptive_count([0.5], [5000], budget=100, dropoff=0.5, min_items=1) == 1  # one item always
    assert within_budget(tokens, 70) == 3 and within_budget(tokens, None) == 7 and within_budget([500], 10) == 1
