"""The consolidation size benchmark on a small synthetic set (real Qdrant Edge, rule decisions)."""

from memstream.bench.consolidate import consolidate_size, synthetic_cards


def test_synthetic_cards_are_deterministic_and_similar_within_an_attribute():
    a, b = synthetic_cards(200), synthetic_cards(200)
    assert [p.id for p in a] == [p.id for p in b] and len({p.id for p in a}) == 200
    assert all(p.payload["valid_to"] is None and p.text for p in a)


def test_every_card_gets_one_queue_and_nothing_is_deleted(tmp_path):
    run = consolidate_size(400, workdir=tmp_path)
    assert run["queues"] == 400 and run["llm_calls"] == 0
    assert set(run["decisions"]) <= {"keep_both", "duplicate", "supersede"}  # the rules never merge
    assert run["decisions"].get("supersede", 0) > 0 and 0 < run["current_cards"] < 400


def test_life_stories_with_the_rules_supersede_moves_and_collapse_repeats():
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder
    from memstream.bench.consolidate import consolidate_stories, life_stories
    from memstream.processors.consolidation.consolidate import ConsolidateParams, RuleDecider

    stories = life_stories(3)
    assert len(stories) == 18 and [d for _, _, d in stories] == sorted(d for _, _, d in stories)
    params = ConsolidateParams()
    run = consolidate_stories(3, RuleDecider(params), SentenceTransformerEmbedder(None), params=params)
    assert run["llm_calls"] == 0 and run["agreement_with_rules"] == 1.0
    assert run["decisions"].get("duplicate/rules", 0) > 0 and run["decisions"].get("supersede/rules", 0) > 0
