"""The development data sets: they sit beside a source checkout (``../shared``), never beside an
installed package; every command takes another path."""

from __future__ import annotations

from pathlib import Path

from memstream.streams.runtime import REPO_ROOT

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
LOCOMO_DEV = SHARED_DATA / "locomo" / "locomo_dev.json"
LONGMEMEVAL_DEV = SHARED_DATA / "longmemeval" / "longmemeval_s_dev.json"


def locomo_dev_if_present() -> Path | None:
    """The LoCoMo dev set when this checkout has it beside it (benches that fall back on the packaged conversation)."""
    return LOCOMO_DEV if LOCOMO_DEV.exists() else None
