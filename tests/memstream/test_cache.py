"""Things made once into the cache: a file or a folder, never seen half made, and a lost race kept."""

from pathlib import Path

from memstream.cache import cache_dir, made_once


def test_the_cache_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir("onnx") == tmp_path / "memstream" / "onnx"


def test_a_file_is_made_once_and_no_temporary_folder_is_left(tmp_path):
    calls = []

    def make(path: Path) -> None:
        calls.append(path)
        assert path.parent != tmp_path  # made apart, then renamed into place
        path.write_text("made")

    target = tmp_path / "model.onnx"
    assert made_once(target, make) == target and made_once(target, make) == target
    assert target.read_text() == "made" and len(calls) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_a_folder_another_run_renamed_first_is_kept(tmp_path):
    target = tmp_path / "unpacked-model"

    def make_while_another_run_finishes(path: Path) -> None:
        path.mkdir()
        (path / "mine").write_text("late")
        target.mkdir()  # the other run's rename lands before ours
        (target / "theirs").write_text("first")

    assert made_once(target, make_while_another_run_finishes) == target
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["unpacked-model"]
