"""``memstream bench erasure`` on the packaged conversation under three tenants (90 turns), with the
real broker, worker, embedder and embedded store: nothing of a forgotten turn is left in the store,
the tables, the durable record's live view, a backup taken before the forgets once restored, or the
record's raw versions once compacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream.bench.erasure import ErasureOptions, run_erasure_bench

pytestmark = pytest.mark.integration


def test_erasure_survives_the_record_a_backup_restored_and_compaction(tmp_path: Path) -> None:
    result = run_erasure_bench(ErasureOptions(conversations=0, tenants=3, workdir=tmp_path, compaction_timeout_s=240))
    assert result["forgotten_turns"] > 0 and result["dead_letters"] == 0
    assert result["remaining_copies"] == 0, result["remaining_by_place"]
    assert result["kept_turns_found"] == result["kept_turns_expected"] > 0
    assert result["record_remaining"] == 0, result["record_remaining_by_collection"]
    # The backup was taken before the forgets and held their points; the restore re-applied them.
    assert result["backup_points"] > 0
    assert result["restored_backup_remaining"] == 0, result["restored_backup_remaining_by_collection"]
    assert result["restored_kept_turns_found"] == result["kept_turns_expected"]
    # The raw record held the forgotten text under keys that end in a tombstone, until compaction.
    assert result["record_forgotten_versions_before_compaction"] > 0
    assert result["record_forgotten_versions_after_compaction"] == 0
