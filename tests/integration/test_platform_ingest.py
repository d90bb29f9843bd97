"""`memstream ingest --format slack|discord|openai|telegram` over the real broker and worker: every
platform's events become stored turns, an edit leaves only its new version, a deletion leaves nothing
of the message, malformed events are dead-lettered with their reason, unknown ones skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memstream.platforms import FORMATS, Mapped, TurnRemoval, load_events, map_events
from memstream.processors.write.index import CARDS, TURNS
from memstream.schemas import Turn
from memstream.schemas.base import base_turn_id

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"
# Telegram updates and OpenAI message lists name no workspace: the tenant (and for OpenAI the
# conversation) is given, as a user gives it on the command line.
OPTIONS: dict[str, dict[str, str]] = {
    "telegram": {"tenant": "tg-acme"},
    "openai": {"tenant": "oa-acme", "conversation": "chat-1"},
}


def mapped(fmt: str) -> Mapped:
    options = OPTIONS.get(fmt, {})
    return map_events(
        fmt,
        load_events(fmt, FIXTURES / f"{fmt}.json"),
        tenant_id=options.get("tenant"),
        conversation_id=options.get("conversation"),
    )


def surviving(m: Mapped) -> set[tuple[str, str, str]]:
    """(tenant, conversation, turn id) of the turns no removal of the batch covers."""
    removals = [item for item in m.items if isinstance(item, TurnRemoval)]
    out = set()
    for turn in (item for item in m.items if isinstance(item, Turn)):
        covered = any(
            r.tenant_id == turn.tenant_id
            and r.conversation_id == turn.conversation_id
            and base_turn_id(turn.turn_id) in r.turn_ids
            and turn.event_time <= r.before
            for r in removals
        )
        if not covered:
            out.add((turn.tenant_id, turn.conversation_id, turn.turn_id))
    return out


def test_every_platform_format_streams_into_memory_with_edits_deletions_and_dead_letters(make_pipeline):
    pipe = make_pipeline(MEMSTREAM_EXTRACT_MODE="extractive")
    pipe.start_worker()
    expected: set[tuple[str, str, str]] = set()
    removed: set[tuple[str, str, str]] = set()
    rejected = 0
    runs = {}
    for fmt in FORMATS:
        m = mapped(fmt)
        assert m.turns and m.rejected and m.skipped, fmt  # the fixtures exercise every path
        expected |= surviving(m)
        removed |= {(r.tenant_id, r.conversation_id, r.turn_ids[0]) for r in m.removals}
        rejected += len(m.rejected)
        options = OPTIONS.get(fmt, {})
        args = [sys.executable, "-m", "memstream.streams.cli", "ingest", str(FIXTURES / f"{fmt}.json"), "--format", fmt]
        for name, value in options.items():
            args += [f"--{name}", value]
        # The four CLIs side by side (each its own conversations, in order within its own process):
        # most of each one's time is its interpreter starting.
        proc = subprocess.Popen(args, env={**os.environ, **pipe.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        runs[fmt] = (m, proc)
    for fmt, (m, proc) in runs.items():
        out, err = (b.decode() for b in proc.communicate(timeout=120))
        assert proc.returncode == 0, out + err
        assert f"produced {len(m.turns)} turns and {len(m.removals)} forgets" in out, out
        assert f"{len(m.rejected)} malformed events dead-lettered" in out
    assert any(r[2] for r in removed), "edits and deletions are in the fixtures"
    pipe.drain()

    letters = pipe.dead_letters()
    assert len(letters) == rejected
    assert all(letter.stage == "ingest" and letter.reason.startswith("event ") for letter in letters)
    assert {letter.topic.split(":")[0] for letter in letters} == set(FORMATS)

    pipe.stop_workers()
    tenants = {t for t, _, _ in expected}
    with pipe.store() as store:
        stored = {
            (tenant, h.payload["conversation_id"], h.payload["turn_id"])
            for tenant in tenants
            for h in store.scroll(TURNS, tenant, limit=10_000)
        }
        cited = {
            (tenant, h.payload["conversation_id"], base_turn_id(t))
            for tenant in tenants
            for h in store.scroll(CARDS, tenant, limit=10_000)
            for t in h.payload["turn_ids"]
            if "~" not in t
        }
    assert stored == expected
    # Nothing is left of an edited message's first version or of a deleted message.
    assert not removed & stored and not removed & cited
    assert any("~" in turn_id for _, _, turn_id in stored), "an edit's new version is stored"
