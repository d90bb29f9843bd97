"""``memstream bench startup`` end to end, one start of an ingest worker on the running broker: the
JSON has every phase's p50 and max, the run's phases add up to its total, the worker's own marks
were read (its imports, its join), and the plot is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstream.bench.cli import bench
from memstream.bench.startup import PHASES

pytestmark = pytest.mark.integration


def test_one_start_reports_every_phase(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    args = ["startup", "--runs", "1", "--stage-sets", "ingest", "--workdir", str(tmp_path / "w"), "--json", str(out)]
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    startup = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert list(startup["stage_sets"]) == ["ingest"]
    ingest = startup["stage_sets"]["ingest"]
    assert ingest["stages"] == ["compress", "segment", "stm", "extract"]
    assert set(ingest["p50_s"]) == set(ingest["max_s"]) == set(PHASES)
    (run,) = ingest["runs_s"]
    assert run["total"] == pytest.approx(sum(v for k, v in run.items() if k != "total"), abs=0.01)
    for phase in ("supervisor", "worker_imports", "embedder", "join", "first_turn"):
        assert run[phase] > 0, (phase, run)
    assert run["store"] == 0, "an ingest worker opens no store"
    assert set(ingest["first_start_extra_s"]) == {"changelogs_create_s", "store_create_s"}
    assert ingest["meets_target"] == (ingest["p50_s"]["total"] <= startup["target_p50_s"])
