"""The soak bench's pure parts: the workload it streams, its windows and its flatness verdicts."""

from __future__ import annotations

from pathlib import Path

from memstream.bench.soak import SoakOptions, Timed, Workload, compare, flat, folder_bytes, windows


def test_short_conversations_say_a_few_turns_each_then_make_room_and_come_back_once_the_pool_is_used():
    options = SoakOptions(conversations=10, turns_min=2, turns_max=3, active=4, long_conversations=2, long_share=0.2)
    workload = Workload(options)
    turns = [workload.next_turn() for _ in range(400)]
    by_key: dict[tuple[str, str], list[str]] = {}
    for t in turns:
        by_key.setdefault((t.conversation_id, t.session_id), []).append(t.turn_id)
    short = {k: v for k, v in by_key.items() if not k[0].startswith("long")}
    finished = [v for v in short.values() if len(v) >= 2]
    assert all(len(v) <= 3 for v in short.values())
    assert all(v == [f"{v[0].split('-')[0]}-t{i}" for i in range(len(v))] for v in by_key.values())  # in order
    assert {s for _, s in short} >= {"S1", "S2"}, "past the pool, conversations come back as a new session"
    assert len({c for c, _ in short}) == 10
    long_turns = sum(1 for t in turns if t.conversation_id.startswith("long"))
    assert 40 < long_turns < 130
    assert finished and all(
        t.last_in_session == (t.turn_id == ids[-1])
        for (c, s), ids in short.items()
        for t in turns
        if (t.conversation_id, t.session_id) == (c, s) and len(ids) == 3
    )


def test_the_compared_windows_are_the_first_and_last_sixth_at_most_ten_minutes():
    assert windows(3600) == ((0.0, 600.0), (3000.0, 3600.0))
    assert windows(180) == ((0.0, 30.0), (150.0, 180.0))
    assert windows(7200) == ((0.0, 600.0), (6600.0, 7200.0))


def test_a_figure_is_flat_within_the_ratio_or_a_small_difference():
    assert flat(1000.0, 1200.0, "rss_mb", 1.25)
    assert not flat(1000.0, 1300.0, "rss_mb", 1.25)
    assert flat(0.1, 0.5, "reply_p99_s", 1.25)  # 0.4 s: noise, whatever the ratio
    assert not flat(0.5, 1.5, "reply_p99_s", 1.25)
    assert flat(None, 1.0, "lag", 1.25) is None


def test_compare_takes_the_highest_gauge_and_the_p99_of_what_was_sent_in_each_window():
    samples = [
        {"t_s": t, "rss_mb": 100 + t, "table_dir_mb": 0.1, "changelog_mb": 1.0, "lag": 5, "live_entries": 10}
        for t in range(0, 181, 10)
    ]
    fresh = [Timed(5, 0.5), Timed(20, 1.0), Timed(160, 4.0), Timed(170, None)]
    replies = [Timed(1, 0.1), Timed(175, 0.2)]
    result = compare(samples, fresh, replies, 180, 1.25)
    assert result["rss_mb"] == {"first": 130, "last": 280, "flat": False}
    assert result["lag"]["flat"] is True
    assert result["fresh_turn_p99_s"]["last"] == 4.0 and result["fresh_turn_p99_s"]["missed_last"] == 1
    assert result["fresh_turn_p99_s"]["flat"] is False
    assert result["reply_p99_s"]["flat"] is True


def test_folder_bytes_sums_files_in_the_entries_named(tmp_path: Path):
    (tmp_path / "a-changelog-0").mkdir()
    (tmp_path / "a-changelog-0" / "x.log").write_bytes(b"x" * 100)
    (tmp_path / "turns-0").mkdir()
    (tmp_path / "turns-0" / "y.log").write_bytes(b"y" * 50)
    assert folder_bytes(tmp_path) == 150
    assert folder_bytes(tmp_path, name_has="-changelog-") == 100
    (tmp_path / "a-changelog-0" / "x.index").write_bytes(b"i" * 1000)  # the broker's preallocated index
    assert folder_bytes(tmp_path, name_has="-changelog-", suffix=".log") == 100
    assert folder_bytes(tmp_path / "missing") == 0
