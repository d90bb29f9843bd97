"""`bench locomo` and `bench longmemeval` hand every shared option to the run under its own name."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstream.bench import cli

DATA = Path(cli.__file__).resolve().parents[1] / "memstream" / "data"
FLAGS = [
    "--extract", "llm", "--no-consolidate", "--judge-base-url", "http://judge:1/v1", "--judge-model", "judge-m",
    "--planner", "rules", "--k", "7", "--sweep-k", "3,9", "--sweep-tokens", "200,900", "--torch-threads", "2",
    "--seed", "5",
]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "data"), [("locomo", "demo_conversation.json"), ("longmemeval", "demo_longmemeval.json")]
)
def test_each_shared_option_reaches_the_run_under_its_name(command, data, tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(cli, "_run_e2e", lambda bench_set, options, fresh: ran.append((options, fresh)))
    result = CliRunner().invoke(
        cli.bench, [command, "--data", str(DATA / data), "--out", str(tmp_path), "--fresh", *FLAGS]
    )
    assert result.exit_code == 0, result.output
    ((options, fresh),) = ran
    assert fresh and options.out == tmp_path
    assert (options.extract, options.consolidate, options.llm) == ("llm", False, False)
    assert (options.judge_base_url, options.judge_model, options.planner) == ("http://judge:1/v1", "judge-m", "rules")
    assert (options.k, tuple(options.sweep_k), tuple(options.sweep_tokens)) == (7, (3, 9), (200, 900))
    assert (options.torch_threads, options.seed) == (2, 5)


def test_a_bad_shared_option_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "_run_e2e", lambda *a: pytest.fail("ran"))
    data = str(DATA / "demo_conversation.json")
    result = CliRunner().invoke(cli.bench, ["locomo", "--data", data, "--out", str(tmp_path), "--sweep-tokens", "0"])
    assert result.exit_code == 2 and "--sweep-tokens takes budgets" in result.output
