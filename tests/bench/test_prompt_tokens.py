"""`bench prompt-tokens`: the flush's topics and the rendering the extraction prompt had before (no model)."""

from memstream.bench.prompt_tokens import session_topics, timestamp_per_turn
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.processors.write.compress import compress_turn


def test_a_topic_per_session_and_a_timestamp_on_every_turn():
    turns = [compress_turn(t, None, 0.7) for t in locomo_turns(load_locomo(demo_conversation_path())[0], tenant_id="t")]
    topics = session_topics(turns)
    assert [label for label, _ in topics] == [f"session {s}" for s in dict.fromkeys(t.turn.session_id for t in turns)]
    assert sum(len(items) for _, items in topics) == len(turns)
    text = timestamp_per_turn(topics[:1])
    first = turns[0].turn
    assert text.startswith("Conversation:\nTopic ") and text.endswith("\n\nExtract the memory JSON.")
    assert f"[{first.turn_id}] {first.event_time:%Y-%m-%d %H:%M} {first.speaker}: " in text
