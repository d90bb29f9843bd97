"""Paths are resolved once, by the process that reads the settings, and handed on absolute; a command
that reads the embedded store says where it looked when nothing is there, instead of reading zero."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstream.adapters import StoreNotFound, embedded_collections, open_existing_store, store_problem
from memstream.config import Settings
from memstream.streams import runtime
from memstream.streams.cli import cli
from memstream.streams.runtime import processes


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory outside the checkout, with no MEMSTREAM_* path set."""
    for name in ("MEMSTREAM_DATA_DIR", "MEMSTREAM_QDRANT_PATH", "MEMSTREAM_KAFKA_DATA", "MEMSTREAM_QDRANT_URL"):
        monkeypatch.delenv(name, raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_relative_paths_are_made_absolute_against_the_directory_reading_the_settings(elsewhere, monkeypatch):
    monkeypatch.setenv("MEMSTREAM_DATA_DIR", "state")
    s = Settings(qdrant_path=Path("../store"), kafka_data=Path("broker"), kafka_ssl_cafile=Path("ca.pem"))
    assert s.data_dir == elsewhere / "state"
    assert s.qdrant_path == elsewhere.parent / "store" and s.store_path == elsewhere.parent / "store"
    assert s.kafka_data_dir == elsewhere / "broker" and s.kafka_ssl_cafile == elsewhere / "ca.pem"
    assert Settings(data_dir=Path("~/x")).data_dir == Path.home() / "x"


def test_the_defaults_are_under_the_data_dir_of_the_starting_directory(elsewhere):
    s = Settings()
    assert s.data_dir == elsewhere / ".data"
    assert s.store_path == elsewhere / ".data" / "qdrant-edge" and s.kafka_data_dir == elsewhere / ".data" / "kafka"


def test_started_processes_get_the_paths_absolute(elsewhere, monkeypatch):
    monkeypatch.delenv("MEMSTREAM_PROMETHEUS_DATA", raising=False)
    s = Settings(data_dir=Path("d"), qdrant_path=Path("q"))
    env = runtime.path_env(s)
    assert env["MEMSTREAM_DATA_DIR"] == str(elsewhere / "d") and env["MEMSTREAM_QDRANT_PATH"] == str(elsewhere / "q")
    infra = runtime.infra_env(s)
    # The scripts' own default (<repo>/.data) would be site-packages from an installed package.
    assert infra["MEMSTREAM_KAFKA_DATA"] == str(elsewhere / "d" / "kafka")
    assert infra["MEMSTREAM_PROMETHEUS_DATA"] == str(elsewhere / "d" / "prometheus")
    assert all(Path(infra[k]).is_absolute() for k in ("MEMSTREAM_DATA_DIR", "MEMSTREAM_KAFKA_DATA"))


def test_a_worker_starts_in_the_callers_directory_not_the_checkout(elsewhere, monkeypatch):
    seen: dict = {}

    class Popen:
        pid = 1

        def __init__(self, args, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(processes.subprocess, "Popen", Popen)
    runtime.spawn_worker({"MEMSTREAM_DATA_DIR": str(elsewhere / "d")}, elsewhere / "w.log")
    assert seen.get("cwd") is None and seen["env"]["MEMSTREAM_DATA_DIR"] == str(elsewhere / "d")


def test_a_service_that_already_answers_is_used_not_started():
    service = runtime.LocalService("no/such/script.sh", lambda _s: True)
    assert service.start(Settings()) is False  # the script was not needed


def test_a_missing_infra_script_says_what_to_run_instead():
    with pytest.raises(FileNotFoundError, match="memstream worker"):
        runtime.LocalService("no/such/script.sh").running(Settings())


def test_a_missing_store_is_named_with_the_setting_that_points_at_it(elsewhere):
    s = Settings()
    problem = store_problem(s)
    assert problem and str(elsewhere / ".data" / "qdrant-edge") in problem and "MEMSTREAM_DATA_DIR" in problem
    with pytest.raises(StoreNotFound, match="no memstream store at"):
        open_existing_store(s)
    assert not (elsewhere / ".data").exists(), "reading creates nothing"


def test_a_store_folder_without_memstream_collections_is_refused(elsewhere):
    (elsewhere / ".data" / "qdrant-edge" / "other").mkdir(parents=True)
    assert "holds no memstream collection" in (store_problem(Settings()) or "")


def test_a_store_with_collections_of_either_engine_is_found(elsewhere):
    from memstream.adapters.qdrant_edge_store import QdrantEdgeStore

    edge = QdrantEdgeStore(elsewhere / ".data" / "qdrant-edge")
    edge.ensure_collections(["cards"], 4)
    edge.close()
    assert embedded_collections(elsewhere / ".data" / "qdrant-edge") == {"memstream_cards"}
    assert store_problem(Settings()) is None
    local = elsewhere / ".data" / "qdrant-local"
    local.mkdir()
    (local / "meta.json").write_text(json.dumps({"collections": {"memstream_turns": {}}, "aliases": {}}))
    assert store_problem(Settings(qdrant_embedded="local")) is None
    assert store_problem(Settings(qdrant_url="http://127.0.0.1:9")) is None  # a server: nothing to look at


def test_export_from_a_directory_without_a_store_fails_and_names_the_path(elsewhere):
    result = CliRunner().invoke(cli, ["export", "--tenant", "acme", "--out", "acme.jsonl"], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert "no memstream store at" in result.output and str(elsewhere / ".data") in result.output
    assert "exported" not in result.output and not (elsewhere / "acme.jsonl").exists()


def test_export_of_a_tenant_with_no_records_in_an_existing_store_is_zero(elsewhere):
    from memstream.adapters.qdrant_edge_store import QdrantEdgeStore
    from memstream.processors.write.index import COLLECTIONS

    edge = QdrantEdgeStore(elsewhere / ".data" / "qdrant-edge")
    edge.ensure_collections(list(COLLECTIONS), 4)
    edge.close()
    result = CliRunner().invoke(cli, ["export", "--tenant", "nobody", "--out", "n.jsonl"])
    assert result.exit_code == 0, result.output
    assert "exported 0 records" in result.output and os.path.getsize(elsewhere / "n.jsonl") == 0


def test_a_bench_default_data_set_missing_beside_an_install_asks_for_data(monkeypatch, capsys):
    import memstream.bench.cli as bench_cli
    from memstream.streams.cli.bench import run_bench

    missing = runtime.REPO_ROOT.parent / "shared" / "data" / "locomo" / "nowhere.json"

    def fails(**_kwargs: object) -> None:
        raise FileNotFoundError(2, "No such file or directory", str(missing))

    monkeypatch.setattr(bench_cli, "bench", fails)
    assert run_bench(["ingest"]) == 2
    assert "give the data file with --data" in capsys.readouterr().out

    def fails_elsewhere(**_kwargs: object) -> None:
        raise FileNotFoundError(2, "No such file or directory", "/some/other/file")

    monkeypatch.setattr(bench_cli, "bench", fails_elsewhere)
    with pytest.raises(FileNotFoundError):  # not a default data set: the error as it is
        run_bench(["ingest"])
