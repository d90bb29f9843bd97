"""The durable record and `memstream rebuild` on the embedded store, against the real broker and the
real embedder: the record holds what the store holds (after a forget too); a new generation is built
from it beside the serving worker, switched to once the worker stops, and answers as the old one did."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from memstream.adapters.generations import active_generation, store_generations
from memstream.processors.write.index import COLLECTIONS
from memstream.streams.rebuild import Rebuild
from memstream.streams.record_log import live_points
from memstream.streams.services import Services

from .conftest import first_sessions

pytestmark = pytest.mark.integration
QUESTION = "What did they talk about?"


def store_points(store, tenant: str) -> dict[str, dict]:
    return {
        f"{tenant}/{c}/{hit.id}": dict(hit.payload)
        for c in COLLECTIONS
        for hit in store.scroll(c, tenant, limit=100_000)
    }


def record_points(settings, tenant: str) -> dict[str, dict]:
    live = asyncio.run(live_points(settings))
    return {key: dict(p.payload) for key, p in live.items() if p.tenant_id == tenant}


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

    pipe.stop_workers()
    with pipe.store() as store:
        old = store_points(store, "acme")
    assert old == record_points(pipe.settings, "acme")  # every point, its payload as stored
    assert not any(p.get("speaker") == speaker for p in old.values())  # the forget reached both

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memstream.streams.cli",
            "rebuild",
            "--switch",
            "--json",
            str(pipe.settings.data_dir / "r.json"),
        ],
        env=pipe.env | {"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
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
