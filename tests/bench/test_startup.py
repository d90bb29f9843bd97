"""The start-up marks (streams/runtime/startup.py) and how bench startup turns them into phases."""

from __future__ import annotations

import logging

import pytest

from memstream.bench.startup import PHASES, phase_durations, summarize
from memstream.streams.runtime.startup import StartupClock, phase_epochs, process_start_epoch


def test_process_start_from_proc_stat() -> None:
    # starttime (field 22) 500 ticks after boot, a name with spaces and a parenthesis; now 20 s after boot
    fields = ["S"] + ["0"] * 18 + ["500"] + ["0"] * 10
    stat = "123 (odd) name) " + " ".join(fields)
    ticks = __import__("os").sysconf("SC_CLK_TCK")
    assert process_start_epoch(stat, now=1000.0, boot_now=20.0) == pytest.approx(1000.0 - (20.0 - 500 / ticks))


def test_this_process_started_before_now() -> None:
    import time

    started = process_start_epoch()
    assert 0 < time.time() - started < 24 * 3600


def test_marks_are_logged_and_parsed(caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, float] = {}
    clock = StartupClock(started=100.0)
    with caplog.at_level(logging.INFO):
        clock.mark_start()
        clock.mark("imports")
        clock.publish(lambda phase, since: seen.__setitem__(phase, since))  # earlier marks too
        clock.mark("imports")  # a second one (a restart's) is not the first start's
        clock.mark("ready")
    marks = phase_epochs(caplog.text)
    assert marks["process"] == 100.0
    assert list(marks) == ["process", "imports", "ready"]
    assert marks["imports"] <= marks["ready"]
    assert set(seen) == {"process", "imports", "ready"}
    assert seen["ready"] == pytest.approx(marks["ready"] - 100.0, abs=0.01)


def test_phases_follow_the_marks_in_their_order() -> None:
    # the store opened before the attention model (a stage's order), no compressor
    marks = {"process": 1.0, "spawn": 1.5, "imports": 3.0, "topics": 3.5, "embedder": 4.0, "store": 6.0}
    marks |= {"attention": 7.0, "app": 7.2, "assigned": 8.0, "ready": 8.1, "handled": 8.6}
    phases = phase_durations(0.5, marks)
    assert set(phases) == set(PHASES)
    assert phases["supervisor"] == 1.0 and phases["worker_imports"] == 1.5
    assert phases["store"] == 2.0 and phases["attention"] == 1.0 and phases["compressor"] == 0.0
    assert phases["join"] == 0.8 and phases["recovery"] == pytest.approx(0.1)
    assert phases["first_turn"] == 0.5
    assert phases["total"] == 8.1
    assert sum(v for k, v in phases.items() if k != "total") == pytest.approx(phases["total"])


def test_summary_is_p50_and_max() -> None:
    runs = [phase_durations(0.0, {"spawn": t, "handled": 2 * t}) for t in (1.0, 2.0, 4.0)]
    summary = summarize(runs)
    assert summary["p50_s"]["total"] == 4.0 and summary["max_s"]["total"] == 8.0
    assert summary["p50_s"]["supervisor"] == 2.0 and summary["max_s"]["first_turn"] == 4.0
