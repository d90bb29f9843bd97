"""The durable record and `memstream rebuild` on the embedded store, against the real broker and the
real embedder: the record holds what the store holds (after a forget too); a new generation is built
from it beside the serving worker, switched to once the worker stops, and answers as the old one did."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from memstream.adapters import open_store
from memstream.adapters.generations import active_generation, store_generations
from memstream.bench.deployment import free_port
from memstream.processors.operations.rebuild import load_progress
from memstream.processors.write.index import CARDS, TURNS
from memstream.streams.rebuild import Rebuild
from memstream.streams.record_log import RecordLog
from memstream.streams.services import Services

from .conftest import first_sessions, metric_total, record_points, store_points

pytestmark = pytest.mark.integration
QUESTION = "What did they talk about?"


def memstream(pipe, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "memstream.streams.cli", *args]
    return subprocess.run(command, env=os.environ | pipe.env, capture_output=True, text=True, timeout=300)


def test_the_record_holds_the_store_and_a_rebuild_from_it_replaces_the_store(make_pipeline):
    conversation, turns, _ = first_sessions(1)
    pipe = make_pipeline()
    pipe.start_worker("w1")
    pipe.produce(turns)
    pipe.drain()
    speaker = turns[0].speaker
    outcome = pipe.forget(tenant="acme", conversation=conversation, speaker=speaker)
    assert sum(outcome.counts.values()) > 0

    # Built from the record while the worker serves (the embedded store's lock is the worker's).
    services = Services(pipe.settings)
    report = Rebuild(pipe.settings, services.embedder).run()
    assert report.generation == 1 and report.previous == 0 and not report.switched
    assert report.mismatches == {} and sum(report.points.values()) > len(turns) // 2
    before = pipe.ask(QUESTION, tenant="acme", conversation=conversation, answer=False)
    assert before.evidence

    locked = memstream(pipe, "rebuild", "--switch")  # the embedded store is the running worker's
    assert locked.returncode == 2 and "stop it first" in locked.stdout and "built and kept" in locked.stdout
    assert active_generation(pipe.settings) == 0

    pipe.stop_workers()
    with pipe.store() as store:
        old = store_points(store, "acme")
    assert old == record_points(pipe.settings, "acme")  # every point, its payload as stored
    assert not any(p.get("speaker") == speaker for p in old.values())  # the forget reached both

    done = memstream(pipe, "rebuild", "--switch", "--json", str(pipe.settings.data_dir / "r.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((pipe.settings.data_dir / "r.json").read_text())
    assert result["switched"] and result["resumed"] and result["generation"] == 1
    assert active_generation(pipe.settings) == 1 and store_generations(pipe.settings) == [0, 1]
    with pipe.store() as store:
        assert store_points(store, "acme") == old

    pipe.start_worker("w2")
    after = pipe.ask(QUESTION, tenant="acme", conversation=conversation, answer=False)
    # The same points, embedded again by the same model: the same evidence, near enough (ties aside).
    same = {e.point_id for e in after.evidence} & {e.point_id for e in before.evidence}
    assert len(same) >= len(before.evidence) // 2


def test_a_rebuild_killed_midway_goes_on_and_a_generation_short_of_the_record_is_not_switched_to(make_pipeline):
    conversation, turns, _ = first_sessions(2)
    pipe = make_pipeline()
    pipe.start_worker("w1")
    pipe.produce(turns)
    pipe.drain()
    pipe.stop_workers()
    port = free_port()
    command = [sys.executable, "-m", "memstream.streams.cli", "rebuild", "--batch", "4", "--metrics-port", str(port)]
    killed = subprocess.Popen(command, env=os.environ | pipe.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while metric_total(port, "memstream_rebuild_points_total") < 8:
        assert killed.poll() is None and time.monotonic() < deadline, "the rebuild never got going"
        time.sleep(0.05)
    killed.kill()  # kill -9, mid-build
    killed.wait()
    entries = asyncio.run(entries_in_record(pipe.settings))
    with contextlib.closing(open_store(pipe.settings, generation=1)) as half:
        saved = load_progress(half)
        assert saved is not None and 0 < saved.applied < entries  # killed with the build half done

    done = memstream(pipe, "rebuild", "--json", str(pipe.settings.data_dir / "r.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((pipe.settings.data_dir / "r.json").read_text())
    assert result["resumed"] and result["generation"] == 1 and result["mismatches"] == {}
    assert result["applied"] == entries  # each entry applied once, across the two runs
    with contextlib.closing(open_store(pipe.settings, generation=1)) as built:
        assert store_points(built, "acme") == record_points(pipe.settings, "acme")
        [card] = built.scroll(CARDS, "acme", limit=1)
        built.delete(CARDS, "acme", [card.id])  # the new generation is now short of the record

    refused = memstream(pipe, "rebuild", "--switch")
    assert refused.returncode == 2 and "does not hold what the record holds" in refused.stdout
    assert "cards: " in refused.stdout and active_generation(pipe.settings) == 0


async def entries_in_record(settings) -> int:
    async with RecordLog(settings) as record:
        return sum([len(batch) async for batch in record.read(None, await record.end_offsets())])


def test_a_backup_restored_after_the_store_is_lost_has_what_came_later_and_not_what_was_forgotten(make_pipeline):
    conversation, turns, _ = first_sessions(2)
    first = [t for t in turns if t.session_id == "S1"]
    later = [t for t in turns if t.session_id != "S1"]
    pipe = make_pipeline()
    pipe.start_worker("w1")
    pipe.produce(first)
    pipe.drain()
    pipe.stop_workers()
    backup = pipe.settings.data_dir / "backup-1"
    done = memstream(pipe, "backup", "--out", str(backup))
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["record_offsets"] and sum(manifest["counts"].values()) > len(first)

    pipe.start_worker("w2")
    pipe.produce(later)  # after the backup: only the record has these
    pipe.drain()
    speaker = first[0].speaker
    assert sum(pipe.forget(tenant="acme", conversation=conversation, speaker=speaker).counts.values()) > 0
    pipe.stop_workers()
    with pipe.store() as store:
        before = store_points(store, "acme")
    shutil.rmtree(pipe.settings.store_path)  # the disaster: every collection gone

    done = memstream(pipe, "restore", str(backup), "--switch", "--json", str(pipe.settings.data_dir / "r.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((pipe.settings.data_dir / "r.json").read_text())
    assert result["switched"] and result["mismatches"] == {} and result["reconciled"] > 0
    with pipe.store() as store:
        after = store_points(store, "acme")
    assert after == before == record_points(pipe.settings, "acme")
    assert not any(p.get("speaker") == speaker or p.get("subject") == speaker for p in after.values())
    later_ids = {t.turn_id for t in later if t.speaker != speaker}
    assert later_ids <= {p["turn_id"] for p in after.values() if p.get("kind") == "turn"}


def test_record_sync_makes_the_record_hold_what_a_store_written_without_it_holds(make_pipeline):
    conversation, turns, _ = first_sessions(1)
    pipe = make_pipeline(MEMSTREAM_RECORD_ENABLED="false")  # as a version before the record wrote it
    pipe.start_worker("w1")
    pipe.produce(turns[: len(turns) // 2])
    pipe.drain()
    pipe.stop_workers()
    assert record_points(pipe.settings, "acme") == {}
    done = memstream(pipe, "record", "sync")
    assert done.returncode == 0, done.stdout + done.stderr
    with pipe.store() as store:
        assert store_points(store, "acme") == record_points(pipe.settings, "acme")

    # This version's worker goes on, then a rollback: one of an earlier version rewrites a point and
    # deletes another without recording either.
    pipe.start_worker("w2", env={"MEMSTREAM_RECORD_ENABLED": "true"})
    pipe.produce(turns[len(turns) // 2 :])
    pipe.drain()
    pipe.stop_workers()
    with pipe.store() as store:
        [card] = store.scroll(CARDS, "acme", limit=1)
        store.set_payload(CARDS, "acme", card.id, {"retired": True})
        [turn] = store.scroll(TURNS, "acme", limit=1)
        store.delete(TURNS, "acme", [turn.id])
        stored = store_points(store, "acme")
    done = memstream(pipe, "record", "sync")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 points added, 1 updated, 1 tombstoned" in done.stdout
    assert record_points(pipe.settings, "acme") == stored
    again = memstream(pipe, "record", "sync")
    assert again.returncode == 0 and "0 points added, 0 updated, 0 tombstoned" in again.stdout
