"""The extraction prompt's rendering of a flush (pure)."""

from datetime import datetime, timedelta, timezone

from memstream.processors.write.prompts import extract_user
from tests.factories import compressed, turn


def test_the_date_is_written_once_per_day_above_its_turns():
    day1 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    turns = [
        turn("D1:1", "I adopted a dog.", session="S1", seq=0),
        turn("D1:2", "What is its name?", session="S1", seq=1),
        turn("D2:1", "Pepper loves the beach.", session="S2", seq=2),
    ]
    times = [day1, day1 + timedelta(seconds=30), day1 + timedelta(days=3)]
    items = [compressed(t.model_copy(update={"event_time": when})) for t, when in zip(turns, times)]
    text = extract_user([("dog", items[:2]), ("beach", items[2:])])
    lines = text.splitlines()
    assert lines[1:4] == ["Topic T1 (dog):", "Monday 2023-05-08:", f"[D1:1] {turns[0].speaker}: I adopted a dog."]
    assert lines[4] == f"[D1:2] {turns[1].speaker}: What is its name?"  # same day: no second date
    assert lines[5:7] == ["Topic T2 (beach):", "Thursday 2023-05-11:"]
    assert text.count("2023-05-08") == 1 and "13:56" not in text
