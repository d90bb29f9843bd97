from datetime import datetime, timezone

import pytest

from memstream.processors.timeparse import find_time_mentions, parse_locomo_datetime, resolve_first

# Monday 8 May 2023, 13:56 UTC
ANCHOR = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "text, expected, granularity",
    [
        ("I went there yesterday", "2023-05-07", "day"),
        ("we met today", "2023-05-08", "day"),
        ("see you tomorrow!", "2023-05-09", "day"),
        ("the day before yesterday was rough", "2023-05-06", "day"),
        ("last Saturday I painted", "2023-05-06", "day"),
        ("next Friday is the party", "2023-05-12", "day"),
        ("I ran a charity race last week", "2023-05-01", "week"),
        ("we're moving next month", "2023-06-01", "month"),
        ("I started last year", "2022-01-01", "year"),
        ("two years ago I quit", "2021-01-01", "year"),
        ("3 days ago it rained", "2023-05-05", "day"),
        ("a few weeks ago", "2023-04-17", "week"),
        ("in two weeks we fly", "2023-05-22", "week"),
        ("my birthday is on 27 June, 2023", "2023-06-27", "day"),
        ("since May 2021", "2021-05-01", "month"),
        ("back in 2019 we met", "2019-01-01", "year"),
    ],
)
def test_relative_phrases_resolve_against_the_turn_time(text, expected, granularity):
    mention = resolve_first(text, ANCHOR)
    assert mention is not None
    assert mention.start.date().isoformat() == expected
    assert mention.granularity == granularity
    assert mention.phrase.lower() in text.lower()


def test_no_time_no_mention():
    assert resolve_first("I like painting sunsets", ANCHOR) is None


def test_mentions_come_in_text_order_without_overlap():
    mentions = find_time_mentions("Yesterday was fine, but last week was better than 3 days ago.", ANCHOR)
    assert [m.phrase.lower() for m in mentions] == ["yesterday", "last week", "3 days ago"]


def test_locomo_session_dates_parse():
    assert parse_locomo_datetime("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    assert parse_locomo_datetime("12:09 am on 13 September, 2023").hour == 0
    with pytest.raises(ValueError):
        parse_locomo_datetime("yesterday")


def test_phrases_that_resolve_outside_the_calendar_are_left_unresolved():
    from datetime import datetime, timezone

    from memstream.processors.timeparse import find_time_mentions

    first = datetime(1, 1, 1, tzinfo=timezone.utc)
    last = datetime(9999, 12, 31, tzinfo=timezone.utc)
    assert find_time_mentions("I saw her yesterday, last week and last year.", first) == []
    assert find_time_mentions("See you tomorrow, next week and next year.", last) == []
    assert [m.phrase for m in find_time_mentions("yesterday and tomorrow", last)] == ["yesterday"]
