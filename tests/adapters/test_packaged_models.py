"""Models named by the settings: the packaged MiniLM by default, a folder as given, and MPNet joined
from the pieces its PyPI packages ship (here pieces of a small zip of our own)."""

import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from memstream.adapters import packaged_models
from memstream.adapters.packaged_models import MINILM, MPNET, ModelNotInstalled, assemble_mpnet, model_name, model_path


def test_minilm_is_the_default_and_a_folder_is_taken_as_given():
    minilm = model_path(None)
    assert model_path(MINILM) == minilm and (Path(minilm) / "config.json").is_file()
    assert model_name(minilm) == MINILM  # its package's folder is called "model"
    assert model_path("/models/my-encoder") == "/models/my-encoder"
    assert model_name("/models/my-encoder/") == "my-encoder"


def _split_zip(tmp_path: Path, pieces: int) -> list[Path]:
    archive = tmp_path / "src.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(f"{MPNET}/model.safetensors", b"w" * 5000)
        z.writestr(f"{MPNET}/config.json", '{"hidden_size": 768}')
        z.writestr(f"{MPNET}/1_Pooling/desktop.ini", "[.ShellClassInfo]")
    data = archive.read_bytes()
    size = len(data) // pieces + 1
    parts = []
    for i in range(pieces):
        part = tmp_path / f"{MPNET}.zip.{i + 1:03d}"
        part.write_bytes(data[i * size : (i + 1) * size])
        parts.append(part)
    return parts


def test_mpnet_is_joined_from_its_pieces_once(tmp_path, monkeypatch):
    parts = _split_zip(tmp_path, 5)
    monkeypatch.setattr(packaged_models, "mpnet_part_files", lambda: parts)
    folder = assemble_mpnet(tmp_path / "cache")
    assert folder == tmp_path / "cache" / MPNET
    assert (folder / "model.safetensors").read_bytes() == b"w" * 5000
    assert (folder / "config.json").is_file() and not list(folder.rglob("desktop.ini"))
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [MPNET]  # no temporary folder left

    def never() -> list[Path]:
        raise AssertionError("the pieces were read again")

    monkeypatch.setattr(packaged_models, "mpnet_part_files", never)
    assert assemble_mpnet(tmp_path / "cache") == folder


def test_mpnet_without_its_packages_says_how_to_install_them(tmp_path, monkeypatch):
    def missing(name: str):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(packaged_models.metadata, "distribution", missing)
    with pytest.raises(ModelNotInstalled, match=r"memstream\[mpnet\]"):
        assemble_mpnet(tmp_path / "cache")
    assert not (tmp_path / "cache" / MPNET).exists()
