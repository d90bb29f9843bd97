"""The bench commands behind the docs' single figures: registered on `memstream bench`, and a bad
choice refused before anything runs."""

from typer.testing import CliRunner

from memstream.bench.cli import bench

runner = CliRunner()
COMMANDS = (
    "changelog-bytes",
    "content-query-grid",
    "fill-recall",
    "grammar-speed",
    "prompt-tokens",
    "query-steps",
    "trace-figures",
    "tracing-overhead",
)


def test_every_command_is_on_memstream_bench():
    for command in (*COMMANDS, "embed-device prepare", "embed-device measure"):
        result = runner.invoke(bench, [*command.split(), "--help"])
        assert result.exit_code == 0, (command, result.output)


def test_a_bad_choice_is_refused_before_anything_runs(tmp_path):
    result = runner.invoke(bench, ["fill-recall", "nope", str(tmp_path), "tune", "{}"])
    assert result.exit_code == 2 and "BENCH is one of locomo, longmemeval" in result.output
    result = runner.invoke(bench, ["fill-recall", "locomo", str(tmp_path), "all", "{}"])
    assert result.exit_code == 2 and "SPLIT is one of tune, report" in result.output
    result = runner.invoke(bench, ["content-query-grid", str(tmp_path), "--split", "x", "--json", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--split is one of tune, report, all" in result.output
