"""The freshness bench's pure parts: which turns it streams and probes, what a memory write on the
topic tells it about each probe, and its figures."""

from __future__ import annotations

from datetime import datetime, timezone

from memstream.bench.freshness import Probe, Watch, backlog_run, figures, packaged_run
from memstream.datasets import demo_conversation_path
from memstream.schemas import Card, MemoryWrite, Provenance
from tests.factories import source


def test_the_packaged_run_streams_every_turn_and_the_backlog_run_the_last_session_behind_the_rest():
    backlog, streamed = packaged_run()
    assert backlog == [] and len(streamed) == 30 and len({t.turn_id for t in streamed}) == 30
    ahead, behind, sample = backlog_run(demo_conversation_path(), None)
    assert {t.session_id for t in behind} == {"S3"} and "S3" not in {t.session_id for t in ahead}
    assert len(ahead) + len(behind) == sample.turn_count
    assert {t.conversation_id for t in ahead + behind} == {f"backlog-{sample.sample_id}"}


def test_a_memory_write_gives_its_probes_a_card_text_to_ask_or_none():
    _, streamed = packaged_run()
    probes = [Probe(t) for t in streamed[:3]]
    watch = Watch(None, probes, None, lambda: None)  # type: ignore[arg-type]  # only saw() here
    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    first, second, third = (p.turn for p in probes)
    sources = [
        source(t.turn_id, t.speaker, t.text, i, at=t.event_time, session_id=t.session_id, role=t.role)
        for i, t in enumerate((first, second))
    ]
    card = Card(
        card_id="c1",
        subject=first.speaker,
        type="fact",
        content="Nora signed up for a pottery class.",
        provenance=Provenance(turn_ids=[first.turn_id]),
        valid_from=now,
    )
    write = MemoryWrite(
        tenant_id=first.tenant_id,
        conversation_id=first.conversation_id,
        write_id="w1",
        flush_id="f1",
        mode="extractive",
        cards=[card],
        scenes=[],
        source_turns=sources,
        written_at=now,
    )
    watch.saw(write)
    assert probes[0].card_text == card.content and not probes[0].no_card
    assert probes[1].card_text is None and probes[1].no_card  # flushed, but no card cites it
    assert probes[2].card_seen_at is None and not probes[2].no_card  # not flushed yet


def test_figures_are_nearest_rank_percentiles_of_what_was_seen():
    f = figures([0.1, None, 0.3, 0.2], missed=1)
    assert (f.n, f.p50_s, f.p99_s, f.max_s, f.missed) == (3, 0.2, 0.3, 0.3, 1)
    assert figures([None], missed=1).n == 0
