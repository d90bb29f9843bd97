"""``memstream bench soak`` end to end, 36 s: its own broker (the store embedded), a worker, turns at a
steady rate into ten short conversations at a time, eviction after 15 s; the JSON has every figure of
both windows and eviction happened, so the live entries stay below the entries ever made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstream.bench.cli import bench

pytestmark = pytest.mark.integration

FIGURES = ("rss_mb", "table_dir_mb", "changelog_mb", "lag", "live_entries", "fresh_turn_p99_s", "reply_p99_s")


def test_a_short_soak_reports_its_figures_and_evicts(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    args = ["soak", "--minutes", "0.6", "--rate", "6", "--conversations", "20", "--active", "10", "--evict-idle", "15"]
    args += ["--sleep-idle", "8", "--stm-idle", "3", "--retention", "60", "--sample-every", "3", "--store", "embedded"]
    args += ["--probe-every", "4", "--question-every", "2", "--workdir", str(tmp_path / "w"), "--json", str(out)]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    soak = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 10_000
    for name in FIGURES:
        figure = soak["flatness"][name]
        assert figure["first"] is not None and figure["last"] is not None, (name, figure)
        assert figure["flat"] in (True, False)
    assert soak["turns"] >= 160 and soak["samples"][-1]["changelog_mb"] > 0
    assert soak["evicted_entries"]["segment"] > 0 and soak["evicted_entries"]["stm"] > 0
    made = soak["conversations_started"] + soak["probes"]  # entries per table, at most (long ones aside)
    assert soak["live_entries_end"] < 0.75 * 3 * made, (soak["live_entries_end"], made)
    assert soak["conversations_returned"] > 0, "past the pool of 20, conversations came back"
    assert soak["reply_errors"] == 0
