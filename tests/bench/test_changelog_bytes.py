"""`bench changelog-bytes`: the state bytes per turn of the packaged conversation (no model, no broker)."""

from memstream.bench.changelog_bytes import loopback_send_ms, state_bytes
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns


def test_every_turn_is_counted_and_the_seen_ids_are_part_of_the_state():
    turns = len(list(locomo_turns(load_locomo(demo_conversation_path())[0], tenant_id="t")))
    result = state_bytes(demo_conversation_path(), stm_tokens=2000)
    assert result["turns"] == turns
    assert 0 < result["segmenter_seen_bytes_per_turn"] < result["segmenter_bytes_per_turn"]
    assert 0 < result["stm_seen_bytes_per_turn"] < result["stm_bytes_per_turn"]


def test_ids_in_pieces_cost_a_turn_less_than_one_list():
    pieces = state_bytes(demo_conversation_path(), stm_tokens=2000, piece_ids=4)
    one_list = state_bytes(demo_conversation_path(), stm_tokens=2000, piece_ids=10**9)
    assert pieces["segmenter_seen_bytes_per_turn"] < one_list["segmenter_seen_bytes_per_turn"]
    assert pieces["stm_seen_bytes_per_turn"] < one_list["stm_seen_bytes_per_turn"]


def test_a_loopback_send_costs_some_cpu():
    assert loopback_send_ms(10_000, sends=20) >= 0.0
